"""``polymap.plan``: tile and fuse a chain of einsums under an on-chip capacity with SCIP.

The planner reads the program as a chain (:mod:`polymap.plan.chain`), builds one SCIP
model of every plan (:mod:`polymap.plan.formulation`), solves it, reads the plan back and
accounts for it exactly in integers (:mod:`polymap.plan.tree`). The printed traffic and
footprints are that exact accounting of the plan SCIP chose; SCIP's own objective and dual
bound are printed next to it, in the same unit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from pyscipopt import SCIP_PARAMSETTING

from polymap.errors import ArgumentError, CapacityError, InternalError, PlanError, PolymapError, SolverError
from polymap.ir.nodes import Program
from polymap.ir.validate import check_program_argument
from polymap.mapping.outcome import Outcome, SolveReport
from polymap.plan.chain import Chain, read_chain
from polymap.plan.tree import (
    Accounting,
    Level,
    LinkMode,
    Loop,
    Nest,
    account,
    link_mode_of,
    reduction_outside_output,
    segments,
)
from polymap.progress import watch_solve

DEFAULT_TIME_LIMIT_S = 60.0

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}

# the link modes each strategy may choose from (polymap.plan.frontier)
STRATEGY_MODES = {
    "unfused": frozenset({LinkMode.DRAM}),
    "untiled": frozenset({LinkMode.DRAM, LinkMode.WHOLE}),
    "tiled": frozenset(LinkMode),
}


@dataclass(frozen=True, slots=True)
class Capacity:
    """The on-chip store: ``amount`` elements, or bytes when ``in_bytes``."""

    amount: int
    in_bytes: bool = False

    @classmethod
    def parse(cls, text: str | int) -> Capacity:
        """``16384``, ``16K``, ``512K`` (elements) or ``64KiB``, ``228KB``, ``1MiB``, ``4096B`` (bytes).
        K, M and G are powers of 1024 with or without the i (``16KB`` is 16384 bytes)."""
        if isinstance(text, bool):
            raise ArgumentError(
                f"capacity must be a number of elements or a size such as '64KiB', got {text!r}"
            )
        if isinstance(text, int):
            return cls._checked(text, False, str(text))
        match = re.fullmatch(r"\s*([0-9]+)\s*([kKmMgG]?)(i?[bB])?\s*", str(text))
        if not match or (match.group(3) or "").lower() == "ib" and not match.group(2):
            raise ArgumentError(
                f"capacity {text!r}: expected a number of elements (16384, 16K) or of bytes (64KiB, 4096B)"
            )
        amount = int(match.group(1)) * _UNITS[match.group(2).lower()]
        return cls._checked(amount, match.group(3) is not None, text)

    @classmethod
    def _checked(cls, amount: int, in_bytes: bool, text) -> Capacity:
        if amount < 1:
            raise ArgumentError(f"capacity {text!r} must be at least 1")
        return cls(amount, in_bytes)

    @property
    def unit(self) -> str:
        return "bytes" if self.in_bytes else "elements"

    def __str__(self) -> str:
        return f"{self.amount} {self.unit}"


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan SCIP chose for a chain (module :mod:`polymap.plan.tree` says what it means)."""

    chain: Chain
    capacity: Capacity
    nests: tuple[Nest, ...]
    modes: tuple[LinkMode, ...]  # per link position (DRAM where there is no link)
    accounting: Accounting
    report: SolveReport
    objective_unit_bytes: float  # SCIP's objective and bound are in units of this many bytes
    sizes: tuple[tuple[str, int], ...]
    min_band_tiles: int = 1  # the fewest band tiles a segment fused a tile at a time may have
    # SCIP's time for the plan without tiled links, solved first and given to the whole search
    # as its first solution (``_untiled_start``); included in ``report.solve_time_s``
    first_solution_s: float = 0.0

    @property
    def segments(self) -> tuple[tuple[int, ...], ...]:
        return segments(self.modes)

    @property
    def bytes(self) -> int:
        """Off-chip traffic of the plan, exactly."""
        return self.accounting.total_bytes

    def link_modes(self) -> dict[str, LinkMode]:
        return {link.buffer: mode for link, mode in zip(self.chain.links, self.modes) if link is not None}

    def __str__(self) -> str:
        from polymap.plan.report import format_plan

        return format_plan(self)

    def to_json(self) -> dict:
        """The report as JSON-ready data (:func:`polymap.plan.report.plan_data`)."""
        from polymap.plan.report import plan_data

        return plan_data(self)


def plan(
    program: Program,
    capacity: int | str | Capacity,
    *,
    links: dict[str, str | LinkMode] | None = None,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    strategy: str = "tiled",
    min_band_tiles: int = 1,
) -> Plan:
    """The tiling and fusion of ``program``'s einsum chain that moves the fewest bytes off
    chip within ``capacity`` (elements, or bytes with a unit: ``"64KiB"``), proved optimal
    by SCIP. ``links`` pins intermediates: ``{"Q": "dram"}`` (written back), ``"tiled"``
    (fused, one tile at a time) or ``"whole"`` (kept whole on chip). ``strategy`` narrows the
    space: ``"unfused"`` (every intermediate written back), ``"untiled"`` (written back or
    kept whole), ``"tiled"`` (everything: the default). ``min_band_tiles`` is the fewest
    band tiles a segment fused a tile at a time may have (on a GPU, its kernel's blocks: the
    SM count fills one wave); a link whose band cannot have that many is not tiled."""
    if isinstance(min_band_tiles, bool) or not isinstance(min_band_tiles, int) or min_band_tiles < 1:
        raise ArgumentError(f"min_band_tiles must be a whole number >= 1, got {min_band_tiles!r}")
    if strategy not in STRATEGY_MODES:
        raise ArgumentError(f"strategy {strategy!r}: expected one of {', '.join(STRATEGY_MODES)}")
    check_program_argument(program, "plan")
    if links is not None and not isinstance(links, dict):
        raise ArgumentError(f"links must be a dict such as {{'Q': 'dram'}}, got {type(links).__name__}")
    if time_limit_s is not None and (
        isinstance(time_limit_s, bool)
        or not isinstance(time_limit_s, (int, float))
        or not math.isfinite(time_limit_s)
        or time_limit_s <= 0
    ):
        raise ArgumentError(f"time limit {time_limit_s!r}: expected a positive number of seconds, or None")
    cap = capacity if isinstance(capacity, Capacity) else Capacity.parse(capacity)
    try:
        return _plan(program, cap, links or {}, time_limit_s, STRATEGY_MODES[strategy], min_band_tiles)
    except PolymapError as err:
        raise err.located(**program.error_context()) from None


def _plan(
    program: Program, cap: Capacity, links: dict, time_limit_s: float | None, allowed, min_band_tiles: int = 1
) -> Plan:
    from polymap.mapping.farkas import solve
    from polymap.plan.formulation import build
    from polymap.poly.model import analyze

    # a plan of an invalid program would be a plan of nothing: prove it valid first
    # (in bounds, race free), as `polymap check` does
    analyze(program.bind_defaults())
    chain = read_chain(program)
    _check_fits(chain, cap)
    pinned = _link_pins(chain, links)

    def model_of(modes_allowed):
        try:
            return build(
                chain,
                cap.amount,
                bytes_unit=cap.in_bytes,
                modes=pinned,
                allowed=modes_allowed,
                min_band_tiles=min_band_tiles,
            )
        except Exception as err:  # pyscipopt raises plain Exceptions
            raise SolverError(f"SCIP rejected the plan model of '{chain.program}': {err}") from err

    start, first_s = _untiled_start(chain, pinned, allowed, model_of, time_limit_s)
    model = model_of(allowed)
    if start is not None:
        model.start_from(start)
    if time_limit_s is not None and first_s:  # the limit holds for both solves together
        time_limit_s = max(time_limit_s - first_s, 0.01)
    watch_solve(
        model.scip,
        f"plan of {chain.program}",
        unit="bytes",
        scale=math.exp(model.log_traffic_scale),
        what="plan",
    )
    report = solve(model.scip, time_limit_s=time_limit_s)
    if report.outcome is Outcome.INFEASIBLE:
        # SCIP's presolve has called a model with plans infeasible (three GEMMs of 16 x 4 at
        # 64 elements with every link written back: optimal at 63 elements, and at 64 with
        # presolve off): the infeasibility is confirmed without presolve before it is
        # reported, and a plan found so is SCIP's answer
        model = model_of(allowed)
        model.scip.setPresolve(SCIP_PARAMSETTING.OFF)
        if start is not None:
            model.start_from(start)
        again = solve(model.scip, time_limit_s=time_limit_s)
        report = replace(again, solve_time_s=report.solve_time_s + again.solve_time_s)
    report = replace(report, solve_time_s=report.solve_time_s + first_s)  # every solve's time
    if report.outcome is Outcome.INFEASIBLE:
        pins = ", ".join(f"{chain.links[k].buffer}={mode.value}" for k, mode in pinned.items())
        floor = f" and bands of at least {min_band_tiles} tiles" if min_band_tiles > 1 else ""
        raise CapacityError(
            f"no plan of '{chain.program}' fits in {cap} with the pins {pins}{floor}: each pinned intermediate "
            "must fit on chip with what its einsums need"
            + (", and a tiled one's band must have that many tiles" if floor else "")
            if pins
            else f"no plan of '{chain.program}' fits in {cap} (SCIP proved it infeasible)"
        )
    if not report.outcome.solved:
        raise PlanError(
            f"SCIP found no plan of '{chain.program}' (status '{report.status}'); try a longer time limit"
        )
    nests, modes = model.read_plan()
    accounting = account(chain, nests, modes, bytes_unit=cap.in_bytes)
    sizes = tuple(program.bind_defaults().bindings)
    result = Plan(
        chain,
        cap,
        nests,
        modes,
        accounting,
        report,
        math.exp(model.log_traffic_scale),
        sizes,
        min_band_tiles,
        first_s,
    )
    _check(result)
    return result


def _untiled_start(chain: Chain, pinned: dict, allowed, model_of, time_limit_s: float | None):
    """SCIP's best plan without tiled links, as a first solution for the whole search: the
    values of its variables by name (None where no such plan was found), and the SCIP time
    spent on it (0.0 where it was not solved: tiling is not allowed, or a link is pinned
    tiled). That plan is feasible for the whole model (the same model with fewer modes), and
    it is optimal, or nearly, where fusing a tile at a time saves little: SCIP then prunes
    most of its tree over the loop orders. On ``polymap bench --plan``'s 13 cases the two
    solves took 3.2 s in all, against 4.5 s for the whole search alone
    (docs/benchmarks/2026-11-29-plan-first-solution.md)."""
    from polymap.mapping.farkas import solve

    untiled = frozenset(allowed) - {LinkMode.TILED}
    if untiled == frozenset(allowed) or LinkMode.TILED in pinned.values() or not any(chain.links):
        return None, 0.0
    first = model_of(untiled)
    report = solve(first.scip, time_limit_s=time_limit_s)
    return (first.solution() if report.outcome.solved else None), report.solve_time_s


MAX_ITERATIONS = 2**64  # beyond this the model's logarithms span more than SCIP's LP holds


def _check_fits(chain: Chain, cap: Capacity) -> None:
    """The least any plan needs is one element of each tensor of an einsum."""
    for einsum in chain.einsums:
        if einsum.iterations > MAX_ITERATIONS:
            raise PlanError(
                f"einsum {einsum.name} `{einsum.text}` has {einsum.iterations:.3g} iterations: the planner "
                f"plans at most 2^64 per einsum",
                loc=einsum.loc,
            )
        least = sum(t.itemsize if cap.in_bytes else 1 for t in einsum.tensors)
        if cap.amount < least:
            raise CapacityError(
                f"capacity {cap} is below what einsum {einsum.name} `{einsum.text}` needs at the least: one "
                f"element of each of its {len(einsum.tensors)} tensors ({least} {cap.unit})",
                loc=einsum.loc,
            )


def _link_pins(chain: Chain, links: dict[str, str | LinkMode]) -> dict[int, LinkMode]:
    pinned: dict[int, LinkMode] = {}
    names = {t.buffer for e in chain.einsums for t in e.tensors}
    for buffer, mode in links.items():
        if not isinstance(buffer, str) or buffer not in names:
            raise ArgumentError(
                f"link {buffer!r}: the chain has no buffer of that name (its buffers: {', '.join(sorted(names))})"
            )
        try:
            mode = LinkMode(mode)
        except ValueError:
            raise ArgumentError(f"link {buffer}={mode!r}: expected dram, tiled or whole") from None
        index = next(
            (k for k, link in enumerate(chain.links) if link is not None and link.buffer == buffer), None
        )
        if index is None:  # (every other buffer goes through DRAM: a pin of it would pin nothing)
            known = ", ".join(link.buffer for link in chain.links if link is not None) or "none"
            doing = "link" if mode is LinkMode.DRAM else "keep"
            raise PlanError(
                f"cannot {doing} '{buffer}'{' on chip' if doing == 'keep' else ''}: it is not an intermediate "
                f"that one einsum writes and only the next one reads (those are: {known})"
            )
        pinned[index] = mode
    return pinned


def _check(result: Plan) -> None:
    """The plan SCIP returned is a plan: it fits, no partial sum leaves chip, a tiled link's
    band is shared, and SCIP's objective is the exact traffic (within its tolerance)."""
    for e, (einsum, nest, footprint) in enumerate(
        zip(result.chain.einsums, result.nests, result.accounting.footprints, strict=True)
    ):
        if footprint > result.capacity.amount:
            raise InternalError(f"the plan's einsum {einsum.name} needs {footprint} {result.capacity.unit}")
        spilled = reduction_outside_output(einsum, nest)
        if spilled is not None:
            raise InternalError(f"the plan spills partial sums of {einsum.name} over '{spilled}'")
        levels = sorted(item.tensor for item in nest.items if isinstance(item, Level))
        expected = [
            t
            for t in range(len(einsum.tensors))
            if t not in nest.held and link_mode_of(result.chain, result.modes, e, t) is not LinkMode.WHOLE
        ]
        if levels != expected:
            raise InternalError(f"the plan's nest of {einsum.name} places levels {levels}")
        for d in einsum.dims:
            total = math.prod(
                i.factor for i in nest.band + nest.items if isinstance(i, Loop) and i.dim == d.name
            )
            if total != d.size:
                raise InternalError(
                    f"the plan splits {einsum.name}'s loop {d.name} into {total}, not {d.size}"
                )
    for k, mode in enumerate(result.modes):
        if mode is LinkMode.TILED:
            link = result.chain.links[k]
            band_p = {loop.dim: loop.factor for loop in result.nests[k].band}
            band_c = {loop.dim: loop.factor for loop in result.nests[k + 1].band}
            if {c: band_p[p] for p, c in link.dim_pairs if p in band_p} != band_c:
                raise InternalError(f"the plan's band over {link.buffer} differs between its einsums")
    objective = result.report.objective
    if objective is not None:
        scip_bytes = objective * result.objective_unit_bytes
        if abs(scip_bytes - result.bytes) > 1e-5 * max(result.bytes, 1):
            raise InternalError(f"SCIP's objective is {scip_bytes:.6g} bytes, the plan moves {result.bytes}")
