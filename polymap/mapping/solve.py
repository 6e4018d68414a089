"""``optimize``: choose every kernel's thread mapping by solving an integer program with SCIP.

Per kernel, ``KernelProblem`` gathers what the model needs (the band's extents at the cost
sizes, the global accesses with their Farkas systems, the staging candidates, the body's
locals), ``scip_model.ScipModel`` builds the integer program (its module docstring states
it), SCIP solves it, and ``KernelProblem.cost`` evaluates the same formulas
(``cost_model.py``) for the decisions SCIP chose: the cost the report prints."""

from __future__ import annotations

import contextvars
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import islpy as isl
from pyscipopt import Model

from polymap.errors import (
    ArgumentError,
    InfeasibleMappingError,
    MappingError,
    PolymapError,
    SolverError,
)
from polymap.ir.flops import statement_flops, statement_instructions
from polymap.ir.nodes import Anchor, Assign, AssignOp, Loop, Program, index_vars, reads_of, valued_indices
from polymap.ir.walk import declared_locals, walk_block
from polymap.mapping.accesses import (
    GlobalAccess,
    kernel_accesses,
    kernel_statements,
)
from polymap.mapping.caching import (
    ADJACENT,
    AGAIN,
    FIRST,
    cached_footprints,
    in_flight_fits,
    point_bytes,
    touched_before,
    window_footprints,
)
from polymap.mapping.cost_model import (
    MAX_LOG_SEQ,
    REGISTERS_LANES,
    REGISTERS_PER_BUFFER,
    REGISTERS_PER_STAGED,
    REGISTERS_THREAD,
    arithmetic_instructions,
    atomic_time,
    copy_instructions,
    fill_fraction,
    issue_rate,
    lane_busy,
    lane_instructions,
    lane_sectors,
    lane_stride,
    latency_time,
    log2_floor,
    loop_step_instructions,
    mentioned_loops,
    occupancy_penalty,
    sectors_per_request,
    shared_read_cost,
    shared_wavefront_rate,
    shared_wavefronts,
    tile_count,
    tile_latency,
    tile_store_wavefronts,
    transposed_store_wavefronts,
    wrapped_sectors,
)
from polymap.mapping.farkas import solve
from polymap.mapping.lanes import spread_loops
from polymap.mapping.outcome import Outcome, SolveReport
from polymap.mapping.pin_checks import check_lane_pins, check_pin_keys
from polymap.mapping.result import RANKING_WEIGHT, AccessCost, KernelCost, Mapping
from polymap.mapping.scip_model import CertificateError, ScipModel
from polymap.mapping.shared_locals import SharedLocalAccess, shared_local_accesses
from polymap.mapping.solved import kernel_key
from polymap.mapping.space import (
    WARP_LANES,
    Axis,
    Kernel,
    KernelMapping,
    LoopMapping,
    LoopPin,
    Pins,
    SpreadLoop,
    body_loops,
    kernels,
    lanes_copies,
    merge_pins,
    shared_arrays,
)
from polymap.mapping.staging import (
    ASYNC_ELEMENT_BYTES,
    WIDE_ROW_BYTES,
    StageCandidate,
    StagedBuffer,
    copy_caps,
    copy_vector,
    per_point_locals,
    scope_loops,
    stage_candidates,
    staged_buffer,
)
from polymap.poly.isl_text import const_value, evaluate_index
from polymap.poly.model import PolyModel, analyze, loop_nest, nest_points
from polymap.progress import step, watch_solve
from polymap.targets import GpuTarget

# SCIP settings for the mapping models. At its default of unlimited separation rounds SCIP
# spent most of the root node separating cuts: 65 rounds of the aggregation separator took
# 0.45 of 0.67 s on one attention kernel. Five rounds map every model of models/ to the same
# proven optimum with a third of the total solving time (18.1 s to 6.2 s, 2-core machine,
# docs/benchmarks/2026-11-23-scip-separation-rounds.md). Optimization-based bound
# tightening (OBBT: an LP per variable bound, for the products of the cost) is off: without
# it the models' solving time fell by a fifth, every optimum the same
# (docs/benchmarks/2026-11-25-kernels-side-by-side.md).
# SCIP does not tighten the LP's feasibility tolerance while a product of the cost stays
# violated: below SoPlex's floor without GMP (1e-10) SoPlex printed "Cannot set optimality
# tolerance ... without GMP" on the terminal (the planner's models had the same setting
# first, plan/formulation.py); every model's optimum and time are the same without it (same
# record).
MAPPING_SCIP_PARAMS = {
    "separating/maxroundsroot": 5,
    "propagating/obbt/freq": -1,
    "constraints/nonlinear/tightenlpfeastol": False,
}
# the updated elements counted one by one for the atomics roof; beyond, their mean
EXACT_ATOMIC_ELEMENTS = 256
DEFAULT_TIME_LIMIT_S = 30.0  # per kernel: a few small programs keep SCIP busy for minutes
EXACT_FEASTOL = 1e-9  # SCIP's feasibility tolerance where a certificate failed at the default


def optimize(
    program: Program,
    target: str | GpuTarget = "h100",
    *,
    pins=None,
    context: str | None = None,
    time_limit: float | None = None,
    registers: bool = True,
    staging: bool = True,
    reassociate: bool = True,
    deterministic: bool = True,
) -> Mapping:
    """Choose the thread mapping of every kernel of ``program`` with SCIP, prove it with isl,
    and return it with its predicted cost and SCIP's report.

    Unbound sizes stay symbolic for the proof (every size in ``context``); the cost is
    estimated at concrete sizes: each size's default, else its smallest value >= 256 in the
    context (else its smallest value), recorded in ``Mapping.cost_sizes``.

    With ``registers`` (the default) reductions first get their accumulators in registers
    (``transform.registers.promote_accumulators``): ``Mapping.program`` is then the rewritten
    program, the one whose cost is estimated, proved and emitted.

    Bands deeper than three par loops are first folded (``transform.fold.fold_deep_bands``).

    With ``staging`` (the default) the model may stage reads in shared memory
    (``staging.py``); ``staging=False`` keeps every read in global memory.

    ``time_limit`` bounds SCIP's time per kernel solve in seconds (``None``: the default
    ``DEFAULT_TIME_LIMIT_S``, 30 s; a finite positive number otherwise). When SCIP stops at
    the limit with a feasible mapping, that best mapping is returned and its report says
    ``timelimit`` with SCIP's objective, dual bound and gap (it is not claimed optimal);
    without one, SolverError names the kernel and the limit.

    With ``reassociate`` (the default) the lanes of a warp may share a float ``+=``/``*=``
    reduction, which changes the order of its sum (``lanes.py``; the report and the emitted
    header say so); ``reassociate=False`` keeps every float sum in the program's order.

    A scatter into a float buffer (``O[I[i]] += x``, made of atomic updates whose order,
    and so whose rounding, varies from run to run) is refused unless ``deterministic`` is
    False (``ir/atomics.py``); integer scatters give one result in any order.

    The steps themselves are ``polymap.pipeline.optimize_program``."""
    from polymap.pipeline import optimize_program  # the pipeline sits above mapping/

    return optimize_program(
        program,
        target,
        pins=pins,
        context=context,
        time_limit=time_limit,
        registers=registers,
        staging=staging,
        reassociate=reassociate,
        deterministic=deterministic,
    ).mapping


def map_kernels(
    model: PolyModel,
    target: GpuTarget,
    pins: Pins,
    time_limit: float | None,
    staging: bool,
    written: Program | None = None,
    reassociate: bool = True,
    symbolic: PolyModel | None = None,
    memo: dict | None = None,
) -> tuple[tuple[KernelMapping, KernelCost, SolveReport], ...]:
    """Solve every kernel of the bound program ``model.program``: its decisions, their cost
    and SCIP's report, in launch order. ``written`` is the program as written, whose
    decisions these become (``rebind``); ``reassociate``: lanes may change the order of a
    float sum (``lanes.py``); ``symbolic``: the model of ``written`` under the context,
    where the loops the lanes may run are found, so that they hold at every size the proof
    covers (at the cost sizes alone a loop of one iteration has no dependence to forbid it);
    ``memo``: kernels solved earlier in the same pipeline run (``solved.py``), filled here."""
    time_limit = checked_time_limit(time_limit)
    all_kernels = kernels(model.program)
    check_pin_keys(pins, all_kernels, model.program if staging else None)
    spread = {}
    if symbolic is not None:
        spread = {
            k.name: spread_loops(k, symbolic, reassociate=reassociate) for k in kernels(symbolic.program)
        }
    out = []
    written_kernels = (
        {k.name: k for k in kernels(written)} if written is not None and memo is not None else {}
    )
    options = (target, time_limit, staging, reassociate)
    problems = []
    with _KernelSolves(memo) as solves:
        for kernel in all_kernels:
            key = None
            if memo is not None:
                key = kernel_key(
                    kernel,
                    model.program,
                    written,
                    written_kernels.get(kernel.name),
                    pins,
                    spread.get(kernel.name),
                    options,
                )
            try:
                problem = KernelProblem.build(
                    kernel,
                    model,
                    target,
                    pins,
                    time_limit,
                    staging,
                    written,
                    reassociate,
                    spread.get(kernel.name),
                )
                check_lane_pins(pins, problem)
            except PolymapError:
                solves.raise_earlier()  # an earlier kernel's error comes first
                raise
            problems.append(problem)
            solves.add(problem, key)  # SCIP starts on it while the next kernel's model is built
        solved = solves.results()
    out = []
    for problem, (report, decisions) in zip(problems, solved):
        if decisions.kernel is not problem.kernel:  # the same problem, solved for another kernel
            decisions = replace(
                decisions, kernel=problem.kernel, spread=problem.spread if decisions.spread else ()
            )
        out.append((decisions, problem.cost(decisions), report))
    return tuple(out)


class _KernelSolves:
    """The kernels' integer programs, solved side by side: they are independent, and SCIP
    releases the GIL while it solves (``farkas.solve``: ``optimizeNogil``), so up to the
    machine's cores solve at once, one thread each, while the next kernel's model is built.
    A problem whose key the memo knows, or whose key an earlier problem of this run has, is
    not solved again. :meth:`results` gives them in launch order, and raises the first
    kernel's error in launch order, whichever thread failed first."""

    def __init__(self, memo: dict | None):
        self.memo = memo
        self.pool = ThreadPoolExecutor(max_workers=_cores(), thread_name_prefix="polymap-scip")
        self.pending: list[tuple[Future | None, object]] = []  # per problem: its solve and key

    def __enter__(self) -> _KernelSolves:
        return self

    def __exit__(self, *exc) -> None:
        # on an error, the solves not started are dropped; the running ones end within
        # their time limit
        self.pool.shutdown(wait=True, cancel_futures=True)

    def add(self, problem: KernelProblem, key) -> None:
        # keys are given with a memo: solved before, or by an earlier kernel of this run
        if key is not None and (key in self.memo or any(k == key for _, k in self.pending)):
            self.pending.append((None, key))
            return
        # each thread runs in a copy of this context: the progress reporter goes along
        future = self.pool.submit(contextvars.copy_context().run, _solve_one, problem)
        self.pending.append((future, key))

    def raise_earlier(self) -> None:
        """Wait for the solves started so far, in launch order, raising the first error."""
        for future, _ in self.pending:
            if future is not None:
                future.result()

    def results(self) -> list[tuple[SolveReport, KernelMapping]]:
        out = []
        for future, key in self.pending:
            if future is None:  # the memo has it: an earlier kernel's entry comes first
                decisions, report = self.memo[key]
            else:
                report, decisions = future.result()
                if key is not None:
                    self.memo.setdefault(key, (decisions, report))
            out.append((report, decisions))
        return out


def _solve_one(problem: KernelProblem) -> tuple[SolveReport, KernelMapping]:
    with step(f"mapping of {problem.kernel.name} (SCIP solved)"):
        return problem.solve_or_explain()


def _atomic_updates_per_element(kernel: Kernel, model: PolyModel) -> int:
    """The most ``atomic`` updates (of a known element) one element takes in the kernel, all
    its statements together, counted by isl on the bound model (an if around a statement
    included): exactly, element by element, where the updated elements are few
    (``EXACT_ATOMIC_ELEMENTS``); else their mean, a lower bound of the most (the roof stays
    a lower bound of the time)."""
    names = {
        s.name for s in kernel_statements(kernel) if isinstance(s, Assign) and s.atomic and not s.is_scatter
    }
    relations: dict[str, list[isl.Map]] = {}
    for stmt in model.statements:
        if stmt.name in names:
            write = stmt.writes[0]
            relations.setdefault(write.buffer, []).append(write.relation.intersect_domain(stmt.domain))
    most = 0
    for found in relations.values():
        elements = found[0].range()
        for relation in found[1:]:
            elements = elements.union(relation.range())
        count = elements.count_val().to_python()
        if not count:
            continue
        if count <= EXACT_ATOMIC_ELEMENTS:
            points: list[isl.Point] = []
            elements.foreach_point(points.append)
            per = max(
                sum(r.intersect_range(isl.Set.from_point(p)).domain().count_val().to_python() for r in found)
                for p in points
            )
        else:
            per = -(-sum(r.domain().count_val().to_python() for r in found) // count)
        most = max(most, per)
    return most


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not every platform has an affinity mask
        return max(1, os.cpu_count() or 1)


def cost_kernels(
    model: PolyModel, target: GpuTarget, mappings: tuple[KernelMapping, ...]
) -> tuple[KernelCost, ...]:
    """The cost model's cost of given decisions (``KernelProblem.cost``) on the bound
    program ``model.program``: each KernelMapping, made for the symbolic program, is moved
    to the bound kernel of its name, with the band's largest extents at these sizes."""
    bound = {k.name: k for k in kernels(model.program)}
    costs = []
    for km in mappings:
        problem = KernelProblem.build(bound[km.kernel.name], model, target, Pins(), None)
        loops = tuple(
            replace(m, extent=band.extent, max_extent=extent)
            for m, band, extent in zip(km.loops, problem.kernel.band, problem.extents)
        )
        costs.append(problem.cost(replace(km, kernel=problem.kernel, loops=loops)))
    return tuple(costs)


def checked_time_limit(value) -> float:
    """SCIP's time limit per kernel in seconds: ``None`` is the default, anything but a finite
    positive number is an ArgumentError (SCIP would read -1 or inf as "no limit")."""
    if value is None:
        return DEFAULT_TIME_LIMIT_S
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ArgumentError(
            f"time_limit must be a finite number of seconds > 0 (or None for the default "
            f"{DEFAULT_TIME_LIMIT_S:g} s), got {value!r}"
        )
    return float(value)


def cost_sizes(program: Program, context: str | None) -> dict[str, int]:
    """Concrete sizes for the cost estimate (see :func:`optimize`)."""
    sizes = {p.name: p.default for p in program.params if p.default is not None}
    free = [p for p in program.param_names if p not in sizes]
    if not free:
        return sizes
    model = analyze(program.bind(**sizes), context=context)
    ctx = model.context
    for name in free:
        isl_name = model.names[name]
        pos = ctx.find_dim_by_name(isl.dim_type.param, isl_name)
        big = ctx.lower_bound_val(isl.dim_type.param, pos, isl.Val.int_from_si(ctx.get_ctx(), 256))
        chosen = big if not big.is_empty() else ctx
        value = (
            chosen.params().lexmin().sample_point().get_coordinate_val(isl.dim_type.param, pos).to_python()
        )
        sizes[name] = int(value)
        ctx = ctx.fix_val(isl.dim_type.param, pos, isl.Val.int_from_si(ctx.get_ctx(), int(value)))
    return sizes


def rebind(mapped: KernelMapping, symbolic_kernels: tuple[Kernel, ...]) -> KernelMapping:
    """The same decisions on the kernel of the unbound program (same position, same loops)."""
    kernel = next(k for k in symbolic_kernels if k.name == mapped.kernel.name)
    loops = tuple(
        LoopMapping(
            m.index,
            m.thread_axis,
            m.block_axis,
            m.threads,
            m.seq,
            m.distribution,
            band.extent,
            m.max_extent,
            m.guard,
            m.group,
        )
        for m, band in zip(mapped.loops, kernel.band)
    )
    return replace(mapped, kernel=kernel, loops=loops)


# --------------------------------------------------------------------------- model


@dataclass
class KernelProblem:
    """The SCIP model of one kernel and what is needed to read a mapping back from it."""

    kernel: Kernel
    model: PolyModel
    target: GpuTarget
    pins: Pins
    time_limit: float  # seconds SCIP may spend on this kernel (per solve)
    launches: int  # host-loop iterations, one launch each
    extents: tuple[int, ...]
    accesses: tuple[GlobalAccess, ...]
    flops: int
    candidates: tuple[StageCandidate, ...] = ()  # reads that may be staged in shared memory
    scope_extents: tuple[tuple[str, int], ...] = ()  # largest extent of each tileable seq loop
    local_elements: int = 0  # elements of the thread body's block-local buffers (registers)
    locals_outside: tuple[tuple[str, int], ...] = ()  # per tileable loop: those outside it
    # per read of a statement inside a seq loop of the body: the band loops its indices
    # mention (where the points interleave, a step holds one value per point they tell apart)
    fragments: tuple[tuple[str, ...], ...] = ()
    # per 0-d block-local buffer the thread body sets once from global data (``held_values``):
    # the band loops its value mentions; counted as a fragment where the points interleave
    held: tuple[tuple[str, ...], ...] = ()
    # iterations of the thread body's innermost loops over every point, per launch
    loop_iterations: int = 0
    # per candidate (buffer, tiled loop): the widest copy the program as written allows
    # (``staging.copy_caps``); absent: the bound program's own
    copy_caps: tuple[tuple[tuple[str, str | None], int], ...] = ()
    certificates_checked: int = 0  # Farkas certificates of the last solution, checked exactly
    # the thread body's loops a warp's lanes may run together (``lanes.py``): the lanes
    # decision is off where there are none
    spread: tuple[SpreadLoop, ...] = ()
    # per spread loop, its runs per band point: the iterations of the loops around it (1 for a
    # loop of the body's top level; each loop at its largest extent, ``_spread_runs``)
    spread_runs: tuple[int, ...] = ()
    # per spread loop, the most iterations it runs at one band point (at the cost sizes): the
    # lanes beyond them have no work (``busy_lanes``, ``lane_busy``)
    spread_extents: tuple[int, ...] = ()
    # per spread loops: each access's ``lane_stride``, computed by isl once
    _lane_strides: dict = field(default_factory=dict, repr=False)
    # the most atomic updates one element of a target takes per launch (``atomic`` updates
    # with a known element; a scatter's elements are known only from the data: not counted)
    atomic_updates_per_element: int = 0
    # (buffer, bytes) of the buffers read from the caches after their first read
    # (``caching.cached_footprints``, then ``caching.window_footprints``): DRAM moves their
    # footprint once per launch
    cached: tuple[tuple[str, int], ...] = ()
    # of those, the buffers held in L2 only over a window of neighbouring band points
    windowed: tuple[str, ...] = ()
    # per access, what its band point touched before (``caching.touched_before``): FIRST,
    # AGAIN (in L2 where the band points in flight fit: ``reuse_fits``) or ADJACENT
    reuse: tuple[str, ...] = ()
    point_bytes: float = 0.0  # the mean global bytes one band point touches (``caching.point_bytes``)
    # with lanes, the accesses to the arrays the spread loops share (``shared_locals.py``):
    # in shared memory, one copy per band point, not in each thread's registers
    shared_accesses: tuple[SharedLocalAccess, ...] = ()
    shared_elements: int = 0  # elements of one copy of the shared arrays
    shared_bytes: int = 0  # bytes of one copy of them
    # the arithmetic instructions of the kernel's statements per launch, at best
    # (``statement_instructions``: the issue roof's, where ``flops`` is the FP32 roof's)
    arithmetic: int = 0

    @classmethod
    def build(
        cls,
        kernel: Kernel,
        model: PolyModel,
        target: GpuTarget,
        pins: Pins,
        time_limit: float | None,
        staging: bool = True,
        written: Program | None = None,
        reassociate: bool = True,
        spread: tuple[SpreadLoop, ...] | None = None,
    ) -> KernelProblem:
        """The problem of one kernel of the bound program ``model.program``; ``written``: the
        program as written (sizes unbound), which bounds the copies' width (``copy_caps``);
        ``reassociate``: whether lanes may change the order of a float sum (``lanes.py``);
        ``spread``: the loops the lanes may run, found on the program the proof covers (every
        size of the context; None: found here, on the bound program)."""
        time_limit = checked_time_limit(time_limit)
        launches = _launches(kernel)
        candidates = stage_candidates(kernel, model.program) if staging else ()
        caps = ()
        if written is not None and candidates:
            caps = copy_caps(next(k for k in kernels(written) if k.name == kernel.name), written)
        accesses = kernel_accesses(kernel, model, launches=launches)
        kinds = touched_before(kernel, model)
        spread = spread_loops(kernel, model, reassociate=reassociate) if spread is None else spread
        if target.warp_size != WARP_LANES:  # the lanes' shuffles and combines are written for 32
            spread = ()
        shared = [d for d in declared_locals(kernel.body) if d.name in shared_arrays(spread)]
        whole = cached_footprints(kernel, model, target)
        windows = window_footprints(kernel, model, target, frozenset(buffer for buffer, _ in whole))
        return cls(
            kernel,
            model,
            target,
            pins,
            time_limit,
            launches,
            _max_extents(kernel, model),
            accesses,
            _kernel_flops(kernel, model) // max(1, launches),
            candidates,
            tuple((loop.index, _loop_extent(loop, model)) for loop in scope_loops(kernel)),
            _elements(declared_locals(kernel.body)),
            tuple(
                (loop.index, _elements(per_point_locals(kernel, loop.index))) for loop in scope_loops(kernel)
            ),
            _fragments(kernel, model, accesses),
            held_values(kernel),
            _loop_iterations(kernel, model) // max(1, launches),
            caps,
            spread=spread,
            spread_extents=tuple(
                _nest_extent(model, (*kernel.host_loops, *kernel.band, *body_loops(kernel.body, sp.path)))
                for sp in spread
            ),
            spread_runs=tuple(_spread_runs(kernel, model, sp) for sp in spread),
            atomic_updates_per_element=_atomic_updates_per_element(kernel, model) // max(1, launches),
            cached=whole + windows,
            windowed=tuple(buffer for buffer, _ in windows),
            reuse=tuple(kinds.get((a.statement, a.text, a.is_write), FIRST) for a in accesses),
            point_bytes=point_bytes(kernel, model, math.prod(_max_extents(kernel, model))),
            shared_accesses=shared_local_accesses(kernel, model, spread, launches),
            shared_elements=_elements(shared),
            shared_bytes=sum(_decl_elements(d) * d.dtype.itemsize for d in shared),
            arithmetic=_kernel_instructions(kernel, model) // max(1, launches),
        )

    @property
    def cached_buffers(self) -> frozenset[str]:
        return frozenset(buffer for buffer, _ in self.cached)

    def reuse_fits(self, lanes: int) -> bool:
        """Whether what the band points in flight touch fits in the L2's cached share, so
        that a re-read of what its band point touched before (``AGAIN``) hits: a band point
        per resident thread, or per ``lanes`` of them, at most every band point
        (``caching.in_flight_fits``)."""
        return in_flight_fits(self.target, self.point_bytes, math.prod(self.extents), lanes)

    def from_caches(self, lanes: int) -> tuple[bool, ...]:
        """Per access, whether the caches serve it under ``lanes`` (1: a thread per band point):
        a read of a cached buffer, or one its band point touched before (``reuse``), and a write
        that merges with the one before."""
        fits = self.reuse_fits(lanes)
        cached = self.cached_buffers
        return tuple(
            a.buffer in cached or kind == ADJACENT or (kind == AGAIN and fits)
            for a, kind in zip(self.accesses, self.reuse or (FIRST,) * len(self.accesses))
        )

    @property
    def cached_bytes(self) -> int:
        """DRAM bytes of the cached buffers: each footprint once (``caching``)."""
        return sum(size for _, size in self.cached)

    @property
    def atomic_s(self) -> float:
        """The atomics roof (``cost_model.atomic_time``): one element's updates one after another."""
        return atomic_time(self.target, self.atomic_updates_per_element)

    def tree_bytes(self, mapping: KernelMapping) -> int:
        """The shared memory of a block of warps' forks and joins: per spread loop, a partial
        per warp of each accumulator, and one element per value lane 0 shares (a broadcast,
        the start of a ``max=``/``min=``)."""
        return self.lanes_tree_bytes(mapping.spread, mapping.lanes)

    def lanes_tree_bytes(self, spread: tuple[SpreadLoop, ...], lanes: int) -> int:
        """``tree_bytes`` of these spread loops on ``lanes`` lanes a point."""
        if lanes <= WARP_LANES:
            return 0
        size = {d.name: d.dtype.numpy.itemsize for d in declared_locals(self.kernel.body)}
        warps = lanes // WARP_LANES
        total = 0
        for sp in spread:
            total += sum(warps * size[name] for name, _ in sp.accumulators)
            total += sum(size[name] for name in sp.from_lane0)
        return total

    def shared_fit_warps_log2(self) -> int:
        """log2 of the fewest warps of a block per point whose SM holds as many threads as
        without the shared arrays (``occupancy_penalty``; 0 where there are none): below it,
        the arrays' bytes limit the blocks an SM holds, so more warps a block hold more."""
        t, used = self.target, self.shared_bytes
        logs = range(log2_floor(t.max_threads_per_block // WARP_LANES) + 1)
        if not used:
            return 0
        fits = (
            m
            for m in logs
            if occupancy_penalty(t, WARP_LANES << m, used) <= occupancy_penalty(t, WARP_LANES << m)
        )
        return next(fits, logs[-1])

    def shared_arrays_bytes(self, lanes: int, threads_per_block: int) -> int:
        """The shared memory of a block's shared arrays (a copy per point, ``lanes_copies``)
        with its forks' and joins' own (``lanes_tree_bytes``): what may hold an SM to fewer
        blocks (``occupancy_penalty``), at most a block's 48 KiB. 0 without shared arrays."""
        if not self.shared_bytes:
            return 0
        copies = self.shared_bytes * lanes_copies(lanes, threads_per_block)
        return copies + self.lanes_tree_bytes(self.spread, lanes)

    @property
    def runs(self) -> dict[tuple[int, ...], int]:
        """Each spread loop's runs per band point, by its path (``lane_instructions``)."""
        return {sp.path: n for sp, n in zip(self.spread, self.spread_runs)}

    @property
    def spread_iterations(self) -> int:
        """The most iterations one spread loop runs at one band point (0: none)."""
        return max(self.spread_extents, default=0)

    def busy_lanes(self, lanes: int) -> int:
        """The lanes of a band point that have work: all of a warp's (its requests serve
        them together), but only as many warps of a point as the spread loops' iterations
        reach; idle warps neither load nor fill the GPU (the fill and the first-load roof)."""
        warp = self.target.warp_size
        if lanes <= warp:
            return lanes
        return warp * min(lanes // warp, max(1, -(-self.spread_iterations // warp)))

    def lane_busy(self, spread: tuple[SpreadLoop, ...]) -> tuple[int, ...]:
        """Per access, the lanes of a warp one request of it serves under these spread loops
        (``cost_model.lane_busy``)."""
        extents = dict(zip((sp.path for sp in self.spread), self.spread_extents))
        return tuple(lane_busy(a, spread, extents, self.target.warp_size) for a in self.accesses)

    def lane_strides(self, spread: tuple[SpreadLoop, ...]) -> tuple[int | None, ...]:
        """Each access's ``cost_model.lane_stride`` under these spread loops (kept)."""
        if spread not in self._lane_strides:
            warp = self.target.warp_size
            self._lane_strides[spread] = tuple(lane_stride(a, spread, warp) for a in self.accesses)
        return self._lane_strides[spread]

    @property
    def reads_global(self) -> bool:
        """Whether the kernel loads from global memory (a read, or a staged tile's copy of
        one): only then does it wait for the memory's latency (``latency_time``)."""
        return any(not a.is_write for a in self.accesses)

    def copy_width(self, candidate: StageCandidate) -> int:
        """The widest copy of a candidate's tile (``staging.copy_vector``), within the program
        as written (``copy_caps``) and a ``copy`` pin on its tiled loop."""
        limit = None
        if candidate.loop is not None:
            limit = merge_pins(self.pins.for_loop(self.kernel.name, candidate.loop)).copy
        width = copy_vector(candidate, self.model.program, limit)
        return min(width, dict(self.copy_caps).get((candidate.buffer, candidate.loop), width))

    @property
    def base_registers(self) -> int:
        """The registers a thread holds whatever the mapping: its ids and a loop counter, and
        an address and an index per global buffer (``REGISTERS_THREAD``, fitted to ptxas)."""
        return REGISTERS_THREAD + REGISTERS_PER_BUFFER * len({a.buffer for a in self.accesses})

    @property
    def most_mapped_registers(self) -> int:
        """The most registers the mapping adds whatever its points: a staged tile's copy per
        buffer that may be staged (one scope is tiled: a buffer is staged once at most), and
        the lanes' combining where the body has spread loops."""
        staged = REGISTERS_PER_STAGED * len({c.buffer for c in self.candidates})
        return staged + (REGISTERS_LANES if self.spread else 0)

    @property
    def register_limit(self) -> int:
        """The most registers a thread may hold: the target's, or more where the body's own
        arrays alone need more (they are in local memory then, ``_locals_hint``), with room
        for what staging and lanes may add to them."""
        own = self.base_registers + self.local_elements
        if own <= self.target.max_registers_per_thread:
            return self.target.max_registers_per_thread
        return own + self.most_mapped_registers

    def registers(self, mapping: KernelMapping) -> int:
        """The model's register estimate of a mapping (``ScipModel._registers``)."""
        total = self.base_registers + self.local_elements
        if mapping.lanes > 1:  # the shared arrays live in shared memory; the lanes combine
            total += REGISTERS_LANES - self.shared_elements
        staging = mapping.staging
        if staging is not None:
            total += REGISTERS_PER_STAGED * len(staging.buffers)
        if mapping.interleaved:
            total += (self.local_elements - len(self.held)) * (mapping.points - 1)
            for used in self.fragments + self.held:  # a value per point they tell apart
                total += math.prod(m.seq for m in mapping.loops if m.index in used) - 1
        elif staging is not None and staging.loop is not None:
            total += dict(self.locals_outside).get(staging.loop, 0) * (mapping.points - 1)
        return total

    def staged_bytes(self, candidate: StageCandidate, spans: dict[str, int]) -> float:
        """Bytes a staged buffer moves from global memory per launch: blocks x tiles x tile,
        i.e. ``e * prod N_j * N_L / prod_{j not in the tile} T_j S_j`` (the model's form,
        without rounding up; ``spans`` gives T_j S_j per band loop)."""
        total = candidate.element_bytes * math.prod(self.extents)
        if candidate.loop is not None:
            total *= dict(self.scope_extents)[candidate.loop]
        for index in self.kernel.indices:
            if index not in candidate.dims:
                total /= spans[index]
        return total

    # -- solving

    def solve_or_explain(self) -> tuple[SolveReport, KernelMapping]:
        """Solve; if the pins make it infeasible, find a minimal set of conflicting pins."""
        report, decisions = self.solve(self.pins)
        if decisions is not None:
            return report, decisions
        if report.outcome is not Outcome.INFEASIBLE:
            limit = (
                f" within the time limit of {self.time_limit:g} s; raise time_limit"
                if report.status == "timelimit"
                else f" (time limit {self.time_limit:g} s)"
            )
            raise SolverError(
                f"kernel {self.kernel.name}: SCIP stopped with status '{report.status}' and no "
                f"feasible mapping{limit}"
            )
        keys = [k for k, _ in self._pins_here()]
        conflict = list(keys)
        for key in keys:  # deletion filter: drop every pin the conflict survives without
            trial = [k for k in conflict if k != key]
            if self.solve(self._only(trial))[1] is None:
                conflict = trial
        if not conflict:  # no pin at all, or none that matters: no mapping fits the limits
            raise InfeasibleMappingError(
                f"{self.kernel.name}: no mapping satisfies the limits of {self.target.name}"
                + (self._locals_hint() or self._capacity_hint())
            )
        pinned = dict(self._pins_here())
        described = "; ".join(f"'{k}' ({pinned[k].describe()})" for k in conflict)
        turned = any(pinned[k].transpose for k in conflict)
        # one thread per point (lanes=1) keeps the body's arrays in its registers
        alone = any(pinned[k].lanes == 1 for k in conflict)
        raise InfeasibleMappingError(
            f"{self.kernel.name} (loops {', '.join(self.kernel.indices)}): the pins {described} conflict: "
            f"no mapping within the limits of {self.target.name} satisfies them together"
            + (
                f" (note that a transposed tile's rows, its second-to-last dimension, are at least "
                f"{WIDE_ROW_BYTES} bytes wide)"
                if turned
                else ""
            )
            + (self._locals_hint(lanes=False) if alone else "")
        )

    def _locals_hint(self, lanes: bool = True) -> str:
        """Why no mapping fits, when the thread body's block-local buffers alone need more
        registers than the smallest block may hold per thread (each thread keeps its band
        point's copy of them: a planned tile of a fused chain, ``--fuse``, can be that big),
        and, where ``lanes`` may share some of them, shared memory cannot hold those."""
        t = self.target
        most = t.max_registers_per_block // t.warp_size
        if self.base_registers + self.local_elements <= most:
            return ""
        sizes = ", ".join(
            f"{decl.name} ({_decl_elements(decl)})" for decl in declared_locals(self.kernel.body)
        )
        where = (
            f": each band point keeps its own block-local buffers {sizes}, {self.local_elements} "
            f"elements in one thread, counted as its registers (or local memory), and a block of "
            f"{t.warp_size} threads, the smallest, has {t.max_registers_per_block} registers, {most} a "
            f"thread"
        )
        shared = sorted(shared_arrays(self.spread))
        if lanes and shared and self.base_registers + self.local_elements - self.shared_elements <= most:
            return (
                f"{where}; with lanes a point keeps {', '.join(shared)} in shared memory instead, "
                f"{self.shared_bytes} bytes, more than a block's {t.shared_memory_per_block} (with --fuse, "
                f"a smaller capacity plans smaller tiles)"
            )
        if not lanes:
            return f"{where} (with lanes, a spread loop's arrays are shared in shared memory instead)"
        return (
            f"{where} (a body's buffers are shared by the lanes only where a spread loop reads or writes "
            f"them, docs/mapping.md; with --fuse, a smaller capacity plans smaller tiles)"
        )

    def _capacity_hint(self) -> str:
        """Why no mapping fits, when a loop is longer than the GPU can launch: the loop on x
        holds at most gridDim.x * blockDim * points per loop and thread, the others gridDim.y
        or .z times as much."""
        t = self.target
        per_block = 2 ** log2_floor(t.max_threads_per_block) * 2**MAX_LOG_SEQ
        most_x = t.max_grid_dim_x * per_block
        most_yz = max(t.max_grid_dim_y, t.max_grid_dim_z) * per_block
        band = list(zip(self.kernel.band, self.extents))
        beyond = [f"{loop.index} ({n} iterations)" for loop, n in band if n > most_x]
        if beyond:
            return (
                f": the loop {', '.join(beyond)} is longer than the GPU can launch "
                f"(gridDim.x x {per_block} = {most_x} iterations)"
            )
        long = [f"{loop.index} ({n} iterations)" for loop, n in band if n > most_yz]
        if len(long) < 2:
            return ""
        return (
            f": the loops {', '.join(long)} each need more than gridDim.y/z x {per_block} = {most_yz} "
            f"iterations, and only one loop can use gridDim.x"
        )

    def _check_magnitudes(self) -> None:
        """SCIP computes in doubles: a coefficient beyond 2^53 (a size or a buffer's row
        stride) is not an exact integer there, and beyond 1e20 it is SCIP's infinity."""
        limit = 2**53
        for access in self.accesses:
            for system in access.systems:
                for row in system.polyhedron.rows:
                    for coeff in row.as_coefficients_dict().values():
                        if abs(coeff) > limit:
                            raise MappingError(
                                f"kernel {self.kernel.name}: {access.text} ({access.statement}) has a coefficient "
                                f"{coeff} in its lane-stride model, beyond 2^53, where SCIP's floating-point "
                                f"arithmetic is no longer exact; the sizes are too large to map"
                            )

    def _pins_here(self) -> list[tuple[str, LoopPin]]:
        loops = self.kernel.indices + tuple(index for index, _ in self.scope_extents)
        return [kp for i in loops for kp in self.pins.for_loop(self.kernel.name, i)]

    def _only(self, keys: list[str]) -> Pins:
        return Pins(tuple((k, p) for k, p in self.pins.by_key if k in keys))

    def solve(self, pins: Pins) -> tuple[SolveReport, KernelMapping | None]:
        if self.kernel.is_serial:
            return SolveReport.no_decisions(), KernelMapping(self.kernel, ())
        self._check_magnitudes()
        try:
            return self._solve(pins, None)
        except CertificateError:
            # SCIP's feasibility tolerance (1e-6) let a Farkas equation with large
            # coefficients hold only within it (a lane stride bound 1 where the rational
            # relaxation needs 1 + 2e-7: s[i // 5000000]); a tighter one finds the exact
            # certificate, at some cost in time, so it is the second try only
            return self._solve(pins, EXACT_FEASTOL)

    def _solve(self, pins: Pins, feastol: float | None) -> tuple[SolveReport, KernelMapping | None]:
        try:
            scip = Model(f"polymap.{self.kernel.name}")
            scip.hideOutput()
            for param, value in MAPPING_SCIP_PARAMS.items():
                scip.setParam(param, value)
            if feastol is not None:
                scip.setParam("numerics/feastol", feastol)
            v = ScipModel(self, scip, pins)
            v.suggest_start()
            watch_solve(scip, self.kernel.name)
            report = solve(scip, time_limit_s=self.time_limit)
        except PolymapError as err:
            if isinstance(err, SolverError) and f"kernel {self.kernel.name}" not in err.message:
                raise SolverError(f"kernel {self.kernel.name}: {err.message}") from err
            raise
        except Exception as err:  # pyscipopt raises plain exceptions
            raise SolverError(f"kernel {self.kernel.name}: SCIP failed: {err}") from err
        if report.n_solutions == 0:
            return report, None
        self.certificates_checked = v.check_certificates(scip)
        return report, v.read(scip)

    # -- cost of a concrete mapping (the same formulas as the model, evaluated)

    def cost(self, mapping: KernelMapping) -> KernelCost:
        """The predicted cost of concrete decisions, by the model's formulas; lane strides
        are the exact maxima over the domain (isl), which equal the Farkas bounds for affine
        accesses."""
        t = self.target
        step = {m.index: m.step for m in mapping.loops}
        delta = {m.index: step[m.index] if m.thread_axis is Axis.X else 0 for m in mapping.loops}
        x_threads = next((m.threads for m in mapping.loops if m.thread_axis is Axis.X), t.warp_size)
        y_threads = next((m.threads for m in mapping.loops if m.thread_axis is Axis.Y), 1)
        wrap = x_threads < t.warp_size  # the warp wraps into rows along the y loop
        beyond_y = x_threads * y_threads < t.warp_size  # and into z: a sector per lane
        delta_y = {m.index: step[m.index] if m.thread_axis is Axis.Y else 0 for m in mapping.loops}
        staged = self._staged(mapping)
        spans = {m.index: m.threads * m.seq for m in mapping.loops}
        rows, total_bytes, shared, wavefronts = [], 0.0, 0, 0.0
        arrays = 0  # the bytes of a block's shared arrays (lanes): they may limit the SM's blocks
        cached = self.cached_buffers
        from_l2 = self.from_caches(mapping.lanes)
        cached_traffic = 0.0  # of total_bytes: what the caches serve (reads) or merge (writes)
        instructions = arithmetic_instructions(t, self.arithmetic)
        instructions += loop_step_instructions(
            t, self.loop_iterations, mapping.points if mapping.interleaved else 1
        )
        lanes = mapping.lanes > 1
        strides, busy = self.lane_strides(mapping.spread), self.lane_busy(mapping.spread)
        for k, (a, along) in enumerate(zip(self.accesses, strides)):
            stride = (0 if along is None else along) if lanes else a.exact_stride(delta)
            if lanes:  # the model's sectors (``lane_sectors``), which the report may show per request
                sigma = sectors = lane_sectors(t, a, along, busy[k])
            elif beyond_y:
                sectors = t.warp_size
            elif wrap:
                sectors = wrapped_sectors(
                    stride,
                    a.exact_stride(delta_y),
                    a.element_bytes,
                    lanes=x_threads,
                    warp=t.warp_size,
                    sector=t.sector_bytes,
                )
            else:
                sectors = sectors_per_request(
                    stride, a.element_bytes, lanes=t.warp_size, sector=t.sector_bytes
                )
            requests = -(-a.instances // t.warp_size)
            if lanes and along is None:
                requests = a.instances  # lane 0's alone: a request per instance
            tile = next((sb for sb in staged if sb.candidate.serves(a.statement, a.buffer, a.is_write)), None)
            from_shared = tile is not None
            moved = 0 if from_shared else sectors * t.sector_bytes * requests
            shown = requests
            instructions += requests  # a global load or store per warp request
            converted = requests  # the values that widen or round (16-bit floats)
            if tile is not None:
                loads, served, converted = shared_read_cost(t, a, mapping, tile, requests)
                wavefronts += served * shared_wavefronts(t, a.element_bytes)
                instructions += loads - requests  # shared loads instead
                shown = math.ceil(loads)
            if a.converts:
                instructions += converted
            if lanes and along is None:
                moved = t.sector_bytes * requests  # a sector per request
                sectors = 1
            elif lanes and busy[k] < t.warp_size:
                # a spread loop shorter than a warp: a request per busy lanes' instances
                shown = -(-a.instances // busy[k])
                sectors = sectors_per_request(along, a.element_bytes, lanes=busy[k], sector=t.sector_bytes)
                moved = sectors * t.sector_bytes * shown
            rows.append(
                AccessCost(
                    a.statement,
                    a.text,
                    a.is_write,
                    stride,
                    sectors,
                    shown,
                    moved,
                    from_shared,
                    from_l2[k],
                )
            )
            if lanes:  # the model's bytes (``lane_sectors``): no tile with lanes
                traffic = a.instances * sigma
            else:
                traffic = 0 if from_shared else a.instances * sectors
            total_bytes += traffic
            cached_traffic += traffic if from_l2[k] else 0
        for sb in staged:
            c = sb.candidate
            moved = self.staged_bytes(c, spans)
            stores = transposed_store_wavefronts if sb.transposed else tile_store_wavefronts
            wavefronts += stores(t, moved, c.element_bytes)
            instructions += copy_instructions(t, moved, c.element_bytes, sb.copy)
            shape = "x".join(map(str, sb.widths))
            if sb.transposed:  # the widths in the buffer's order, then the array as declared
                shape += f", stored transposed as [{']['.join(map(str, sb.padded))}]"
            shared += sb.bytes
            rows.append(
                AccessCost(
                    "copy",
                    f"{c.buffer} tile [{shape}]",
                    False,
                    1,
                    1,
                    math.ceil(moved / t.sector_bytes),
                    math.ceil(moved),
                    False,
                    c.buffer in cached,
                )
            )
            total_bytes += moved
            cached_traffic += moved if c.buffer in cached else 0
        if mapping.lanes > WARP_LANES:  # the block's shared combines (``codegen/lanes_c.BlockTree``)
            shared += self.tree_bytes(mapping)
        if mapping.lanes > 1:
            instructions += lane_instructions(
                t,
                self.accesses,
                strides,
                mapping.spread,
                math.prod(self.extents),
                mapping.lanes,
                self.runs,
                busy,
            )
            # the shared arrays: a copy per band point of the block, loads and stores
            shared += self.shared_bytes * mapping.shared_copies
            arrays = self.shared_arrays_bytes(mapping.lanes, mapping.threads_per_block)
            for a in self.shared_accesses:
                instructions += a.requests(t.warp_size)
                wavefronts += a.wavefronts(t.warp_size)
        threads = mapping.threads_per_block * mapping.blocks
        busy = self.busy_lanes(mapping.lanes)
        fill = fill_fraction(t, mapping, self.extents, busy, arrays)
        # every byte passes through the caches; DRAM moves the cached buffers' footprints once
        memory_s = (total_bytes - cached_traffic + self.cached_bytes) / t.dram_bandwidth
        cache_s = total_bytes / t.cache_bandwidth if any(from_l2) or cached else 0.0
        compute_s = self.flops / t.peak_fp32_flops
        shared_s = wavefronts / shared_wavefront_rate(t)
        issue_s = instructions / issue_rate(t)
        latency_s = latency_time(  # with lanes a warp per point
            t,
            math.prod(self.extents) * busy,
            mapping.points,
            self.reads_global,
            mapping.threads_per_block,
            arrays,
        )
        tile_s, overlapped = 0.0, False
        staging = mapping.staging
        if staging is not None and staging.loop is not None:
            tiles = tile_count(dict(self.scope_extents)[staging.loop], staging.tile)
            tile_s = tile_latency(t, tiles) if tiles > 1 else 0.0
            # the waits overlap the compute where every copy is asynchronous (``cp.async``)
            overlapped = staging.double_buffered and all(
                sb.candidate.element_bytes in ASYNC_ELEMENT_BYTES for sb in staged
            )
        roofs_s = max(memory_s, compute_s, shared_s, issue_s, cache_s) / fill
        return KernelCost(
            self.kernel.name,
            tuple(rows),
            self.flops,
            threads,
            mapping.blocks,
            mapping.threads_per_block,
            fill,
            memory_s,
            compute_s,
            max(roofs_s + (0.0 if overlapped else tile_s), latency_s, tile_s, self.atomic_s),
            self.launches,
            shared,
            self.registers(mapping),
            shared_s,
            RANKING_WEIGHT * (max(memory_s, cache_s) + shared_s) / fill,
            issue_s,
            latency_s,
            tile_s,
            overlapped,
            self.atomic_s,
            cache_s,
            self.cached,
            tuple(
                f"{'write' if a.is_write else 'read'} {a.text} ({a.statement})"
                for a, from_caches in zip(self.accesses, from_l2)
                if from_caches and a.buffer not in cached
            ),
            self.windowed,
        )

    def _staged(self, mapping: KernelMapping) -> list[StagedBuffer]:
        if mapping.staging is None:
            return []
        return [
            staged_buffer(mapping, c)
            for c in self.candidates
            if c.loop == mapping.staging.loop and c.buffer in mapping.staging.buffers
        ]


def _fragments(
    kernel: Kernel, model: PolyModel, accesses: tuple[GlobalAccess, ...]
) -> tuple[tuple[str, ...], ...]:
    """Per read of a statement inside a seq loop of the thread body, the band loops its indices
    mention (``KernelProblem.fragments``)."""
    outer = len(kernel.host_loops) + len(kernel.band)
    out = []
    for a in accesses:
        if not a.is_write and len(model.statement(a.statement).loops) > outer:
            out.append(mentioned_loops(a, kernel.indices))
    return tuple(out)


def held_values(kernel: Kernel) -> tuple[tuple[str, ...], ...]:
    """Per 0-d block-local buffer that the thread body sets once, at its top level, with ``=``
    from global buffers and indices alone (``invariant_reads``' ``X_held``), the band loops its
    value mentions. Where the points interleave, every point computes the same value as the
    points these loops do not tell apart, and the compiler keeps one copy per value (the
    dequantizing matmul's ``zero_held``: ptxas held 109 registers where a copy per point
    makes 138): it is counted as a fragment (``fragments``), not once per point."""
    locals_ = {d.name: d for d in declared_locals(kernel.body)}
    writes: dict[str, int] = {}
    for stmt in walk_block(kernel.body):
        if isinstance(stmt, Assign) and stmt.buffer in locals_:
            writes[stmt.buffer] = writes.get(stmt.buffer, 0) + 1
    out = []
    for stmt in kernel.body:
        if not (isinstance(stmt, Assign) and stmt.op is AssignOp.SET and stmt.predicate is None):
            continue
        decl = locals_.get(stmt.buffer)
        if decl is None or decl.shape or writes[stmt.buffer] != 1:
            continue
        reads = reads_of(stmt.value)
        if any(r.buffer in locals_ for r in reads):  # a value of another local may vary per point
            continue
        used = valued_indices(stmt.value) | {v for r in reads for e in r.indices for v in index_vars(e)}
        out.append(tuple(index for index in kernel.indices if index in used))
    return tuple(out)


def _max_extents(kernel: Kernel, model: PolyModel) -> tuple[int, ...]:
    """The largest extent of each band loop over the nest of the loops around it (host loops,
    outer band loops), as the launcher's grid covers it (``schedule.kernel.grid_dims``), so
    that the proof assumes that grid: not narrowed by the ifs around the statements, nor by
    loops inside the band that are empty for some of its iterations (a triangular loop of
    extent 0 left a statement no instance while the grid still had the band's blocks)."""
    out = []
    for position in range(len(kernel.band)):
        out.append(max(_nest_extent(model, kernel.host_loops + kernel.band[: position + 1]), 1))
    return tuple(out)


def _nest_extent(model: PolyModel, loops: tuple[Loop, ...]) -> int:
    """The largest extent of the last of ``loops`` over the values of the ones before it
    (0 where the nest is empty), at the model's sizes."""
    sizes = [model.names[p] for p in model.params]
    nest = loop_nest(model, loops, dict(zip(model.params, sizes)), sizes).intersect_params(model.context)
    if nest.is_empty():
        return 0
    return int(nest.dim_max(len(loops) - 1).max_val().to_python()) + 1


def _spread_runs(kernel: Kernel, model: PolyModel, sp: SpreadLoop) -> int:
    """How many times a spread loop runs at one band point, at the model's (bound) sizes,
    each fork and join once per run: the iterations of the body's loops around it over
    every band point, shared out among the band points (rounded up). Where a loop around it
    is triangular (its extent an index of another) that is the mean, and the total over the
    launch exact; the product of the loops' largest extents counted a triangle twice."""
    outer = (*kernel.host_loops, *kernel.band)
    around = body_loops(kernel.body, sp.path)[:-1]
    if not around:
        return 1
    points = nest_points(outer, {})
    return -(-nest_points((*outer, *around), {}) // points) if points else 0


def _elements(decls) -> int:
    """Elements of block-local buffers (a dimension that is not a number counts as 1)."""
    return sum(_decl_elements(decl) for decl in decls)


def _decl_elements(decl) -> int:
    """Elements of one block-local buffer, as ``_elements`` counts them."""
    return math.prod(const_value(e) or 1 for e in decl.shape)


def _loop_extent(loop, model: PolyModel) -> int:
    """The largest extent of a seq loop of a thread body over the domains of its statements."""
    best = 0
    for stmt in model.statements:
        domain = stmt.loops_domain  # the loop's own extent: an if inside may narrow a statement's
        for depth, outer in enumerate(stmt.ctx.loops):
            if outer is loop and not domain.is_empty():
                best = max(best, int(domain.dim_max(depth).max_val().to_python()) + 1)
    return max(best, 1)


def _loop_iterations(kernel: Kernel, model: PolyModel) -> int:
    """Iterations of the innermost loops of a kernel's thread body (seq, or par loops that
    a thread runs), over every point and launch: the instances of the first statement of
    each (its body runs once per iteration); 0 in a body without a loop."""
    total = 0
    for stmt in walk_block(kernel.body):
        if isinstance(stmt, Loop) and not any(isinstance(s, Loop) for s in stmt.body):
            first = next((s for s in stmt.body if isinstance(s, (Assign, Anchor))), None)
            if first is not None:
                total += model.instance_count(first.name)
    return total


def _kernel_flops(kernel: Kernel, model: PolyModel) -> int:
    return sum(statement_flops(s) * model.instance_count(s.name) for s in kernel_statements(kernel))


def _kernel_instructions(kernel: Kernel, model: PolyModel) -> int:
    dtypes = {b.name: b.dtype for b in model.program.all_buffers()}
    return sum(
        statement_instructions(s, dtypes.__getitem__) * model.instance_count(s.name)
        for s in kernel_statements(kernel)
    )


def _launches(kernel: Kernel) -> int:
    """Launches of a kernel: the iterations of its host loops at the bound sizes. A product
    of the extents where no inner extent depends on the loop's index (10^7 time steps cost
    nothing), a sum over the loop's values only where one does (a triangular host nest)."""

    def count(loops: tuple[Loop, ...], env: dict) -> int:
        if not loops:
            return 1
        extent = max(0, evaluate_index(loops[0].extent, env))
        if not any(loops[0].index in index_vars(inner.extent) for inner in loops[1:]):
            return extent * count(loops[1:], env) if extent else 0
        return sum(count(loops[1:], {**env, loops[0].index: v}) for v in range(extent))

    return count(kernel.host_loops, {})
