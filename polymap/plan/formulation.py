"""The planner's SCIP model: every plan of :mod:`polymap.plan.tree` for a chain, at once.

Decisions, per einsum: a permutation of its tensors' blocking levels (binaries
``pos[t, j]``), and per dim, bucket and prime p of the dim's size the exponent of p in the
bucket's factor (integers), so that factors always divide the size exactly; per output
dim, the exponents of its fused factor. Per link: tiled or whole (binaries; neither is
dram). Per input: held (binary).

Costs are products of factors, so the model works with their logarithms: a factor's log
is linear in its exponents. Whether bucket b lies inside tensor t's level is linear in the
positions (``inside[t, b] = sum_{j < b} pos[t, j]``), and the log of the factor of dim d in
bucket b *if* it is inside is a continuous ``g[t, d, b]`` pinned to
``inside * log f`` by the usual four linear inequalities. Then

- a tensor's tile is ``exp(sum over its dims of g)``;
- its traffic is ``iterations / exp(sum over the other dims of g)`` (each element of its
  tile is reused by every loop inside its level that does not index it);

and ``tile >= exp(linear)``, ``traffic >= exp(linear)`` are convex constraints that SCIP
handles by outer approximation, with integer branching on top. The capacity
(sum of tiles <= capacity) and the objective (sum of bytes) are linear in those variables:
the whole model is a convex MINLP, solved to proven optimality.

A held tensor or an intermediate kept on chip switches its exponential term off by
subtracting a large constant from its exponent (``exp(-30)`` of an element is far below
SCIP's tolerance) and adds its whole size linearly instead. Capacity holds with half an
element of slack: tiles are integers, so a plan over capacity misses it by at least one,
well beyond SCIP's feasibility tolerance; :func:`polymap.plan.tree.account` re-checks
every plan exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyscipopt import SCIP_PARAMSETTING, Model, exp, quicksum

from polymap.errors import SolverError
from polymap.plan.chain import Chain, Einsum
from polymap.plan.tree import Level, LinkMode, Loop, Nest, link_mode_of

OFF = 30.0  # added to an exponent's headroom to switch a term off: exp(-30) ~ 1e-13


def prime_factors(n: int) -> dict[int, int]:
    """``{p: exponent}`` of ``n``."""
    found: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            found[p] = found.get(p, 0) + 1
            n //= p
        p += 1
    if n > 1:
        found[n] = found.get(n, 0) + 1
    return found


@dataclass
class EinsumVars:
    """The SCIP variables of one einsum."""

    einsum: Einsum
    pos: dict[tuple[int, int], object] = field(default_factory=dict)  # (tensor, position)
    exps: dict[tuple[str, int, int], object] = field(default_factory=dict)  # (dim, bucket, prime)
    fused: dict[tuple[str, int], object] = field(default_factory=dict)  # (dim, prime)
    held: dict[int, object] = field(default_factory=dict)  # input tensor -> binary
    tile: dict[int, object] = field(default_factory=dict)
    traffic: dict[int, object] = field(default_factory=dict)

    @property
    def n_levels(self) -> int:
        return len(self.einsum.tensors)

    def inside(self, t: int, b: int):
        """1 if bucket b lies inside tensor t's level (linear in the positions)."""
        return quicksum(self.pos[t, j] for j in range(b))


@dataclass
class PlanModel:
    """The model, its variables, and how to read a plan back from a solution."""

    scip: Model
    chain: Chain
    einsums: list[EinsumVars]
    tiled: dict[int, object]  # link index -> binary
    whole: dict[int, object]
    primes: dict[tuple[int, str], dict[int, int]]  # (einsum, dim) -> {p: exponent}
    capacity: int = 1
    bytes_unit: bool = False
    log_tile_scale: float = 0.0  # tiles are in units of exp(this): the capacity
    log_traffic_scale: float = 0.0  # traffic is in units of exp(this)

    def solution(self) -> dict[str, float]:
        """SCIP's best solution, every variable's value by name."""
        best = self.scip.getBestSol()
        return {var.name: self.scip.getSolVal(best, var) for var in self.scip.getVars()}

    def start_from(self, values: dict[str, float]) -> None:
        """Give SCIP a first solution: ``values`` by variable name, from a model of the same
        chain built with fewer modes allowed (``solution``), whose variables this model has
        too (where one is missing, none is given). SCIP checks a solution given before the
        solve when it transforms the problem and drops it if infeasible, so a wrong start
        costs time, never the optimum (tests/test_plan.py gives it one of all zeros)."""
        variables = self.scip.getVars()
        if any(var.name not in values for var in variables):
            return
        start = self.scip.createSol()
        for var in variables:
            self.scip.setSolVal(start, var, values[var.name])
        self.scip.addSol(start, free=True)

    def on_chip(self, e: int, t: int):
        """The 0/1 expression 'tensor t of einsum e is an intermediate kept on chip'."""
        k = self.chain.link_index(e, t)
        return 0 if k is None else self.tiled[k] + self.whole[k]

    def read_plan(self) -> tuple[tuple[Nest, ...], tuple[LinkMode, ...]]:
        """The plan of SCIP's best solution."""
        try:
            sol = self.scip.getBestSol()
            value = lambda var: round(self.scip.getSolVal(sol, var))  # noqa: E731
            modes = []
            for k in range(len(self.chain.links)):
                if k in self.tiled and value(self.tiled[k]):
                    modes.append(LinkMode.TILED)
                elif k in self.whole and value(self.whole[k]):
                    modes.append(LinkMode.WHOLE)
                else:
                    modes.append(LinkMode.DRAM)
            modes = tuple(modes)
            nests = tuple(self._read_nest(e, v, value, modes) for e, v in enumerate(self.einsums))
        except Exception as err:  # pyscipopt raises plain Exceptions
            raise SolverError(f"could not read SCIP's solution: {err}") from err
        return nests, tuple(modes)

    def _read_nest(self, e: int, v: EinsumVars, value, modes: tuple[LinkMode, ...]) -> Nest:
        def factor(dim: str, exps: Mapping[int, object]) -> int:
            return math.prod(p ** value(var) for p, var in exps.items())

        band = []
        for d in v.einsum.dims:
            primes = self.primes[e, d.name]
            fused = {p: v.fused[d.name, p] for p in primes if (d.name, p) in v.fused}
            f = factor(d.name, fused) if fused else 1
            if f > 1:
                band.append(Loop(d.name, f))
        held = tuple(t for t, var in v.held.items() if value(var))
        whole = {t for t in range(v.n_levels) if link_mode_of(self.chain, modes, e, t) is LinkMode.WHOLE}
        order = sorted(
            range(v.n_levels), key=lambda t: next(j for j in range(v.n_levels) if value(v.pos[t, j]))
        )
        items: list[Loop | Level] = []
        for b in range(v.n_levels + 1):
            for d in v.einsum.dims:
                primes = self.primes[e, d.name]
                f = factor(d.name, {p: v.exps[d.name, b, p] for p in primes})
                if f > 1:
                    items.append(Loop(d.name, f))
            if b < v.n_levels and order[b] not in held and order[b] not in whole:
                items.append(Level(order[b]))
        return Nest(tuple(band), tuple(items), held)


def build(
    chain: Chain,
    capacity: int,
    *,
    bytes_unit: bool,
    modes: Mapping[int, LinkMode] | None = None,
    allowed: frozenset[LinkMode] = frozenset(LinkMode),
    min_band_tiles: int = 1,
) -> PlanModel:
    """The SCIP model of every plan of ``chain`` within ``capacity``. ``modes`` pins links;
    ``allowed`` are the modes any link may take; a segment fused a tile at a time has at
    least ``min_band_tiles`` band tiles."""
    scip = Model("plan")
    scip.hideOutput()
    # SCIP tightens the LP's feasibility tolerance when a nonlinear constraint stays
    # violated; below SoPlex's floor (1e-10 without GMP) SoPlex prints a warning on the
    # terminal. The exponentials here are accurate to far less than one element anyway.
    scip.setParam("constraints/nonlinear/tightenlpfeastol", False)
    primes = {(e, d.name): prime_factors(d.size) for e, es in enumerate(chain.einsums) for d in es.dims}
    tiled: dict[int, object] = {}
    whole: dict[int, object] = {}
    for k, link in enumerate(chain.links):
        if link is None:
            continue
        tiled[k] = scip.addVar(f"tiled_{link.buffer}", vtype="B")
        whole[k] = scip.addVar(f"whole_{link.buffer}", vtype="B")
        scip.addCons(tiled[k] + whole[k] <= 1)
        use = chain.einsums[k].output
        too_big = use.elements * (use.itemsize if bytes_unit else 1) > capacity
        for mode, var in ((LinkMode.TILED, tiled[k]), (LinkMode.WHOLE, whole[k])):
            if mode not in allowed or (mode is LinkMode.WHOLE and too_big):
                scip.chgVarUb(var, 0.0)
        pinned = (modes or {}).get(k)
        if pinned is not None:
            scip.addCons(tiled[k] == int(pinned is LinkMode.TILED))
            scip.addCons(whole[k] == int(pinned is LinkMode.WHOLE))
    traffic_unit = sum(t.elements for e in chain.einsums for t in e.tensors)
    model = PlanModel(
        scip,
        chain,
        [],
        tiled,
        whole,
        primes,
        capacity,
        bytes_unit,
        math.log(capacity),
        math.log(traffic_unit),
    )
    for e, einsum in enumerate(chain.einsums):
        model.einsums.append(_einsum_vars(model, e, einsum))
    _link_bands(model)
    _band_floor(model, min_band_tiles)
    _conflicts(model)
    _capacity(model, capacity, bytes_unit)
    _objective(model)
    _search_settings(scip)
    return model


def _search_settings(scip: Model) -> None:
    """How SCIP searches this model. Once the binaries (loop orders, links, held inputs) are
    fixed, the rest solves at the root; the time goes to the tree over the loop orders, a
    few hundred to a few thousand small nodes. So SCIP branches on the binaries first, and
    skips the cutting planes and primal heuristics, which cost more per node than they save
    here: on five of ``polymap bench --plan``'s cases, the best of three SCIP times summed to
    1.87 s, against 5.04 s with SCIP's defaults (docs/benchmarks/2026-11-28-plan-objective.md).
    A plan is still proved optimal: only the search order changes. Solutions come from the
    tree's leaves."""
    scip.setSeparating(SCIP_PARAMSETTING.OFF)
    scip.setHeuristics(SCIP_PARAMSETTING.OFF)
    for var in scip.getVars():
        if var.vtype() == "BINARY":
            scip.chgVarBranchPriority(var, 10)


def _einsum_vars(model: PlanModel, e: int, einsum: Einsum) -> EinsumVars:
    scip = model.scip
    v = EinsumVars(einsum)
    n = v.n_levels
    for t in range(n):
        for j in range(n):
            v.pos[t, j] = scip.addVar(f"pos_{e}_{t}_{j}", vtype="B")
    for t in range(n):
        scip.addCons(quicksum(v.pos[t, j] for j in range(n)) == 1)
    for j in range(n):
        scip.addCons(quicksum(v.pos[t, j] for t in range(n)) == 1)
    incident = [model.tiled[k] for k in (e - 1, e) if k in model.tiled]
    for d in einsum.dims:
        for p, a in model.primes[e, d.name].items():
            for b in range(n + 1):
                v.exps[d.name, b, p] = scip.addVar(f"x_{e}_{d.name}_{b}_{p}", vtype="I", lb=0, ub=a)
            total = quicksum(v.exps[d.name, b, p] for b in range(n + 1))
            if not d.reduction and all(d.name in t.dims for t in einsum.tensors):
                # a batch- or head-like rank (Orojenesis): every tensor has it, so no tensor
                # reuses data along it; outside every level it moves the same bytes and
                # shrinks every tile, so it stays there (or in the band). Only where the
                # einsum shares a tiled intermediate is it free, as that tile must hold its
                # whole extent under the band
                for b in range(1, n + 1):
                    scip.addCons(v.exps[d.name, b, p] <= a * quicksum(incident))
            if not d.reduction and incident:
                v.fused[d.name, p] = scip.addVar(f"y_{e}_{d.name}_{p}", vtype="I", lb=0, ub=a)
                # a fused factor only where the einsum shares a band with a neighbour
                scip.addCons(v.fused[d.name, p] <= a * quicksum(incident))
                total = total + v.fused[d.name, p]
            scip.addCons(total == a)
    log_f = {
        (d.name, b): quicksum(math.log(p) * v.exps[d.name, b, p] for p in model.primes[e, d.name])
        for d in einsum.dims
        for b in range(n + 1)
    }
    log_iterations = sum(math.log(d.size) for d in einsum.dims)
    headroom = log_iterations + OFF
    out = n - 1
    for t, use in enumerate(einsum.tensors):
        on_chip = model.on_chip(e, t)
        link = model.chain.link_index(e, t)
        unit = use.itemsize if model.bytes_unit else 1
        if not use.is_output and link is None and use.elements * unit <= model.capacity:
            # (a tensor larger than the capacity can never be held: no variable, and no
            # coefficient of 2^80 / capacity for SCIP to call infinite)
            v.held[t] = scip.addVar(f"held_{e}_{t}", vtype="B")
        held = v.held.get(t, 0)
        whole = model.whole[link] if link is not None else 0
        g = {}
        for d in einsum.dims:
            bound = math.log(d.size)
            for b in range(n + 1):
                var = scip.addVar(f"g_{e}_{t}_{d.name}_{b}", vtype="C", lb=0, ub=bound)
                inside = v.inside(t, b)
                scip.addCons(var <= log_f[d.name, b])
                scip.addCons(var <= bound * inside)
                scip.addCons(var >= log_f[d.name, b] - bound * (1 - inside))
                g[d.name, b] = var
                if d.reduction and t == out:
                    # no partial sum leaves chip: the reduction's loops stay inside the output's level
                    for p, a in model.primes[e, d.name].items():
                        scip.addCons(v.exps[d.name, b, p] <= a * inside)
                if d.name in use.dims and link is not None:
                    # a tile of an intermediate kept on chip is its whole extent under the band
                    for p, a in model.primes[e, d.name].items():
                        scip.addCons(v.exps[d.name, b, p] <= a * (inside + 1 - model.tiled[link]))
        _prune(model, e, v, t, use.dims, exempt=held + on_chip)
        log_tile = quicksum(g[d, b] for d in use.dims for b in range(n + 1))
        v.tile[t] = scip.addVar(f"tile_{e}_{t}", vtype="C", lb=0)
        scip.addCons(v.tile[t] >= exp(log_tile - model.log_tile_scale - headroom * (held + whole)))
        if not use.is_output:
            reuse = quicksum(
                g[d.name, b] for d in einsum.dims if d.name not in use.dims for b in range(n + 1)
            )
            v.traffic[t] = scip.addVar(f"traffic_{e}_{t}", vtype="C", lb=0)
            scip.addCons(
                v.traffic[t]
                >= exp(log_iterations - reuse - model.log_traffic_scale - headroom * (held + on_chip))
            )
    return v


def _prune(model: PlanModel, e: int, v: EinsumVars, t: int, dims: tuple[str, ...], exempt) -> None:
    """Seed 000's constrained bucketing, both ways round. Next to tensor t's level:
    - a factor of one of t's dims just inside the level could move just outside it: t's
      tile shrinks, its traffic and every other tensor's cost stay the same;
    - a factor of another dim just outside the level could move just inside: t's traffic
      shrinks (more reuse), its tile and everything else stay the same.
    Each move makes a plan no worse and one cost strictly smaller, so repeating them ends,
    and some optimal plan has no such factor: the model looks only at those. Held and
    on-chip tensors are exempt (their level costs nothing either way)."""
    n = v.n_levels
    for d in v.einsum.dims:
        for p, a in model.primes[e, d.name].items():
            for j in range(n):
                bucket = j + 1 if d.name in dims else j
                model.scip.addCons(v.exps[d.name, bucket, p] <= a * (1 - v.pos[t, j] + exempt))


def _link_bands(model: PlanModel) -> None:
    """A tiled link's producer and consumer share one band: the same fused factor on each
    pair of dims the link lines up, and no fused factor on any dim the other einsum does not
    write (a reduction of the consumer, or a dim the link does not carry)."""
    scip = model.scip
    for k, link in enumerate(model.chain.links):
        if link is None:
            continue
        tiled = model.tiled[k]
        producer, consumer = model.einsums[k], model.einsums[k + 1]
        paired_p = {p for p, _ in link.dim_pairs}
        paired_c = set()
        for dim_p, dim_c in link.dim_pairs:
            for p, a in model.primes[k, dim_p].items():
                yp = producer.fused.get((dim_p, p), 0)
                yc = consumer.fused.get((dim_c, p), 0)
                if consumer.einsum.dim(dim_c).reduction:
                    scip.addCons(yp <= a * (1 - tiled))
                else:
                    paired_c.add(dim_c)
                    scip.addCons(yp - yc <= a * (1 - tiled))
                    scip.addCons(yc - yp <= a * (1 - tiled))
        for v, paired, e in ((producer, paired_p, k), (consumer, paired_c, k + 1)):
            for (dim, p), y in v.fused.items():
                if dim not in paired:
                    scip.addCons(y <= model.primes[e, dim][p] * (1 - tiled))


def _band_floor(model: PlanModel, tiles: int) -> None:
    """A tiled link's band (its producer's fused factors, which its consumer shares) has at
    least ``tiles`` tiles: on a GPU a band tile is a block, and a band of fewer tiles than
    the GPU has SMs leaves most of it idle. A link whose band cannot reach it is not tiled."""
    if tiles <= 1:
        return
    for k, tiled in model.tiled.items():
        band = quicksum(math.log(p) * y for (_, p), y in model.einsums[k].fused.items())
        # (a hair under the logarithm: a band of exactly ``tiles`` tiles meets it)
        model.scip.addCons(band >= (math.log(tiles) - 1e-9) * tiled)


def _conflicts(model: PlanModel) -> None:
    """Einsums with a dependence other than a link never share a segment."""
    for j, k, _why in model.chain.conflicts:
        between = [model.tiled[i] for i in range(j, k) if i in model.tiled]
        if len(between) == k - j:
            model.scip.addCons(quicksum(between) <= k - j - 1)


def _same_segment_terms(model: PlanModel, e: int, other: int, flag) -> object | None:
    """A variable >= flag AND 'einsums e and other share a segment' (a linear lower bound,
    enough where it only appears on the small side of a <=), or None if they never can."""
    lo, hi = min(e, other), max(e, other)
    between = [model.tiled[i] for i in range(lo, hi) if i in model.tiled]
    if len(between) != hi - lo:
        return None
    z = model.scip.addVar(f"same_{e}_{other}", vtype="C", lb=0, ub=1)
    model.scip.addCons(z >= flag + quicksum(between) - len(between))
    return z


def _capacity(model: PlanModel, capacity: int, bytes_unit: bool) -> None:
    scip = model.scip
    chain = model.chain
    kept: list[list[tuple[int, object]]] = []  # per einsum: (size, flag) held for its segment
    for e, v in enumerate(model.einsums):
        items = []
        for t, use in enumerate(v.einsum.tensors):
            unit = use.itemsize if bytes_unit else 1
            if t in v.held:
                items.append((use.elements * unit, v.held[t]))
            link = model.chain.link_index(e, t)
            if link is not None:
                items.append((use.elements * unit, model.whole[link]))
        kept.append(items)
    for e, v in enumerate(model.einsums):
        terms = []
        for t, use in enumerate(v.einsum.tensors):
            unit = use.itemsize if bytes_unit else 1
            terms.append(unit * v.tile[t])
        terms += [size / capacity * flag for size, flag in kept[e]]
        for other in range(len(chain.einsums)):
            if other == e:
                continue
            for size, flag in kept[other]:
                z = _same_segment_terms(model, e, other, flag)
                if z is not None:
                    terms.append(size / capacity * z)
        # tiles are in units of the capacity (module doc: half an element of slack)
        scip.addCons(quicksum(terms) <= 1 + 0.5 / capacity, name=f"capacity_{e}")


def _objective(model: PlanModel) -> None:
    """Bytes off chip, in units of exp(log_traffic_scale) bytes (``PlanModel.bytes_unit``)."""
    unit = math.exp(model.log_traffic_scale)
    terms = []
    for e, v in enumerate(model.einsums):
        for t, use in enumerate(v.einsum.tensors):
            if use.is_output:
                terms.append(use.itemsize * use.elements / unit * (1 - model.on_chip(e, t)))
                if v.einsum.reads_initial_output:
                    terms.append(use.itemsize * use.elements / unit)
            else:
                terms.append(use.itemsize * v.traffic[t])
                if t in v.held:
                    terms.append(use.itemsize * use.elements / unit * v.held[t])
    # the sum itself, not a variable bounded by it: such a variable would join every einsum
    # into one component, and SCIP solves einsums that nothing else joins (every link
    # written back) as separate problems (measured: docs/benchmarks/2026-11-28-plan-objective.md)
    model.scip.setObjective(quicksum(terms), "minimize")
