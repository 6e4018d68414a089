"""``optimize``: choose every kernel's thread mapping by solving an integer program with SCIP.

Per kernel, with band loops ``j`` of largest extent ``N_j`` at the cost sizes, the model
has (binary unless said otherwise):

* ``ax[j,a]``, ``bx[j,a]``: loop j's thread part / block part is on axis a in {x, y, z};
  every loop has one of each, an axis holds at most one loop, and x holds one;
* ``ut[j,k]``: T_j = 2^k (k <= 10); ``us[j,m]``: S_j = 2^m (m <= 4); ``cyc[j]``: cyclic;
* ``step_j = cyc_j + S_j - cyc_j S_j`` (1 if cyclic, S_j if blocked) and the lane step
  ``delta_j = ax[j,x] * step_j`` (integers, quadratic equalities): moving from lane tid to
  tid + 1 moves loop j by delta_j (the loop on x has at least 32 threads, so a warp lies
  along x);
* per global access r: ``D_r >= |addr_r(x + delta) - addr_r(x)|`` for every point x of the
  domain, linearized by Farkas (``accesses.py``), and the sectors one warp request touches
  ``sigma_r in [1, 32]``: ``32 sigma_r >= 31 e D_r + e`` (the span of 32 lanes at stride
  D_r elements of e bytes) unless ``z_r`` (then ``sigma_r = 32``, one sector per lane);
* ``interleaved``: the thread's points run inside every step of the body (outer-product
  order, ``space.py``);
* the fraction of the GPU the launch fills, 1/u: ``u >= 1``,
  ``u >= (SMs * threads per SM) * prod_j S_j / prod_j N_j`` (fewer threads than the GPU
  holds) unless interleaved (then each point is independent work in flight, and the bound
  is ``(SMs * threads per SM) / prod_j N_j``), ``u >= SMs * prod_j T_j S_j / prod_j N_j``
  (fewer blocks than SMs) and ``u >= threads per SM / (blocks per SM * threads per block)``
  (blocks too small to fill an SM's thread slots).

Shared-memory staging (``staging.py`` says what can be staged and how it runs): a binary
``scope`` per tileable seq loop of the body (or the whole body), at most one; the tile
``K = 2^kappa`` (kappa <= 6 and K not beyond the loop's extent; 1 for the whole body); and a
binary ``st`` per candidate buffer of the chosen scope. A staged buffer's reads in the scope
leave global memory (their sectors drop to 0; each read takes shared-memory wavefronts,
divided by the points that share it where they interleave) and its copies move
``e * prod_j N_j * N_L / prod_{j not in its tile} T_j S_j`` bytes, its tile takes
``e * prod widths`` bytes of shared memory (with an allowance of 1/32 for padding), the tiles
together at most ``shared_capacity`` (48 KB, and no more than the block's share of the SM
for its thread count), and a tile's rows are at least a 32-byte sector wide. The powers of
two are indicator binaries over the sums of the log2 decisions, so all of it is linear.

Objective (microseconds): ``time >= u * bytes / bandwidth`` and ``time >= u * flops / peak``
with ``bytes = sum_r instances_r * sigma_r`` (a warp request of sigma sectors moves
32 sigma bytes for 32 instances) — a roofline estimate, so the objective value is the
predicted kernel time. A tiny tie-break prefers block axes equal to thread axes, fewer
per-thread points and larger tiles (fewer barriers). Limits, all read from the
``GpuTarget`` (the numbers are H100's): a warp (32) <= threads per block <= 1024 (the power
of two at or below ``max_threads_per_block``), blockDim and gridDim within the target's
per-axis limits, registers within its per-thread and per-block limits; and polymap's own:
T_j S_j not beyond the next power of two of N_j, at most 64 points per thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import islpy as isl
from pyscipopt import Model, quicksum

from polymap.errors import (
    ArgumentError,
    InfeasibleMappingError,
    InternalError,
    MappingError,
    PolymapError,
    SolverError,
)
from polymap.ir.flops import statement_flops
from polymap.ir.nodes import Loop, Program, index_vars
from polymap.ir.walk import declared_locals, walk_block
from polymap.mapping.accesses import (
    GlobalAccess,
    delta_symbol,
    kernel_accesses,
    kernel_statements,
)
from polymap.mapping.farkas import add_to_scip, exact_certificate, solve
from polymap.mapping.outcome import Outcome, SolveReport
from polymap.mapping.result import RANKING_WEIGHT, AccessCost, KernelCost, Mapping
from polymap.mapping.space import (
    Axis,
    Distribution,
    Kernel,
    KernelMapping,
    LoopMapping,
    LoopPin,
    Pins,
    Staging,
    kernels,
)
from polymap.mapping.staging import (
    StageCandidate,
    StagedBuffer,
    per_point_locals,
    scope_loops,
    stage_candidates,
)
from polymap.poly.isl_text import const_value, evaluate_index
from polymap.poly.model import PolyModel, analyze
from polymap.progress import step, watch_solve
from polymap.targets import GpuTarget

MAX_LOG_SEQ = 4  # 16 points per loop and thread
MAX_LOG_SEQ_TOTAL = 6  # 64 points per thread (accumulators must fit in registers)

# SCIP settings for the mapping models. At its default of unlimited separation rounds SCIP
# spent most of the root node separating cuts: 65 rounds of the aggregation separator took
# 0.45 of 0.67 s on one attention kernel. Five rounds map every model of models/ to the same
# proven optimum with a third of the total solving time (18.1 s to 6.2 s, 2-core machine,
# docs/benchmarks/2026-11-23-scip-separation-rounds.md).
MAPPING_SCIP_PARAMS = {"separating/maxroundsroot": 5}
MAX_LOG_TILE = 6  # a tiled seq loop runs at most 64 iterations per tile
PADDING = 33 / 32  # a staged tile's rows may be padded by one element in 32 (bank conflicts)
TIE_BREAK = 1e-6  # microseconds: never outweighs a real cost difference
REGISTERS_BASE = 32  # a thread's indices, addresses and loop counters: a rough floor (see _registers)
DEFAULT_TIME_LIMIT_S = 30.0  # per kernel: a few small programs keep SCIP busy for minutes


def shared_wavefronts(target: GpuTarget, element_bytes: int) -> int:
    """Wavefronts (clocks of an SM's shared memory) one warp's access of ``element_bytes``
    elements takes without bank conflicts: 1 for 32-bit elements, 2 for 64-bit. Staged tiles
    are padded so that their column reads have none; a row read is conflict free and a read
    of one element by every lane is a broadcast."""
    return max(1, -(-target.warp_size * element_bytes // target.shared_memory_bytes_per_clock))


def tile_store_wavefronts(target: GpuTarget, moved_bytes, element_bytes: int):
    """Wavefronts of the stores that put ``moved_bytes`` of copied tiles into shared memory:
    a warp stores 32 elements per instruction."""
    return moved_bytes / (element_bytes * target.warp_size) * shared_wavefronts(target, element_bytes)


def fma_instructions(target: GpuTarget, flops: int) -> float:
    """Warp instructions of ``flops`` floating-point operations at best: an FMA per two, a
    warp's lanes at once."""
    return flops / (2 * target.warp_size)


def copy_instructions(target: GpuTarget, moved_bytes, element_bytes: int):
    """Warp instructions of a tile copy of ``moved_bytes``: a global load and a shared store
    per 32 elements."""
    return 2 * moved_bytes / (element_bytes * target.warp_size)


def issue_rate(target: GpuTarget) -> float:
    """Warp instructions the whole GPU issues per second: one per clock per warp scheduler
    (one per register sub-partition of an SM)."""
    return target.sm_count * target.register_sub_partitions * target.clock_hz


def shared_wavefront_rate(target: GpuTarget) -> float:
    """Shared-memory wavefronts the whole GPU serves per second."""
    per_clock = target.shared_memory_bytes_per_clock / (target.warp_size * 4)
    return target.sm_count * target.clock_hz * per_clock


def optimize(
    program: Program,
    target: str | GpuTarget = "h100",
    *,
    pins=None,
    context: str | None = None,
    time_limit: float | None = None,
    registers: bool = True,
    staging: bool = True,
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
    ).mapping


def map_kernels(
    model: PolyModel, target: GpuTarget, pins: Pins, time_limit: float | None, staging: bool
) -> tuple[tuple[KernelMapping, KernelCost, SolveReport], ...]:
    """Solve every kernel of the bound program ``model.program``: its decisions, their cost
    and SCIP's report, in launch order."""
    time_limit = checked_time_limit(time_limit)
    all_kernels = kernels(model.program)
    _check_pin_keys(pins, all_kernels, model.program if staging else None)
    out = []
    for kernel in all_kernels:
        with step(f"mapping of {kernel.name} (model built, SCIP solved)"):
            problem = KernelProblem.build(kernel, model, target, pins, time_limit, staging)
            report, decisions = problem.solve_or_explain()
        out.append((decisions, problem.cost(decisions), report))
    return tuple(out)


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
        costs.append(problem.cost(KernelMapping(problem.kernel, loops, km.staging, km.interleaved)))
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


def _check_pin_keys(pins: Pins, all_kernels: tuple[Kernel, ...], program: Program | None) -> None:
    """Every pin names a loop the model decides; a ``stage`` pin names buffers that can be
    staged over that loop (``program``: the bound program, None when staging is off)."""
    band = {i for k in all_kernels for i in k.indices} | {
        f"{k.name}.{i}" for k in all_kernels for i in k.indices
    }
    tiled = {loop.index for k in all_kernels for loop in scope_loops(k)}
    tiled |= {f"{k.name}.{loop.index}" for k in all_kernels for loop in scope_loops(k)}
    for key, pin in pins.by_key:
        fields = {name for name, _ in pin.items()}
        if key in tiled and key not in band:
            if fields - {"tile", "stage"}:
                raise ArgumentError(
                    f"pin '{key}': '{key}' is a seq loop of a thread's body; only its 'tile' and 'stage' "
                    f"can be pinned, not {', '.join(sorted(fields - {'tile', 'stage'}))}"
                )
            continue
        if key not in band:
            loops = ", ".join(sorted(band)) or "none"
            seqs = ", ".join(sorted(tiled)) or "none"
            raise ArgumentError(
                f"pin '{key}' names no par loop mapped to the GPU (band loops: {loops}) and no seq loop "
                f"that can be tiled (tileable loops: {seqs})"
            )
        if fields & {"tile", "stage"}:
            raise ArgumentError(f"pin '{key}': 'tile' and 'stage' apply to a seq loop, '{key}' is a par loop")
    _check_stage_pins(pins, all_kernels, program)
    _check_interleave_pins(pins, all_kernels)


def interleavable(kernel: Kernel) -> bool:
    """Whether the order of a thread's points is a decision: where the body has a loop. Without
    one, either order runs each point's statements once, unrolled and independent, so the
    code does the same work either way; the points then run one after another."""
    return any(isinstance(s, Loop) for s in walk_block(kernel.body))


def _check_interleave_pins(pins: Pins, all_kernels: tuple[Kernel, ...]) -> None:
    for key, pin in pins.by_key:
        if not pin.interleave:
            continue
        for kernel in all_kernels:
            if not interleavable(kernel) and any(key in (i, f"{kernel.name}.{i}") for i in kernel.indices):
                raise ArgumentError(
                    f"pin '{key}': interleave=True interleaves a thread's points in the steps of a loop of "
                    f"the body, and {kernel.name}'s body has no loop (its points' statements are unrolled "
                    "and independent in either order)"
                )


def _check_stage_pins(pins: Pins, all_kernels: tuple[Kernel, ...], program: Program | None) -> None:
    """A staged buffer that is not a candidate of any loop the pin names would be ignored."""
    for key, pin in pins.by_key:
        if not pin.stage:
            continue
        if program is None:
            raise ArgumentError(
                f"pin '{key}': stage={list(pin.stage)} asks for shared memory, but staging is off "
                "(staging=False)"
            )
        candidates = set()
        for kernel in all_kernels:
            loops = {loop.index for loop in scope_loops(kernel)}
            here = {i for i in loops if key in (i, f"{kernel.name}.{i}")}
            candidates |= {c.buffer for c in stage_candidates(kernel, program) if c.loop in here}
        unknown = [b for b in pin.stage if b not in candidates]
        if unknown:
            names = {b.name for b in program.buffers}
            what = ", ".join(f"'{b}'" + ("" if b in names else " (no such buffer)") for b in unknown)
            raise ArgumentError(
                f"pin '{key}': stage names {what}, which cannot be staged over loop '{key}'; the buffers that can: "
                f"{', '.join(sorted(candidates)) or 'none'}"
            )


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
        )
        for m, band in zip(mapped.loops, kernel.band)
    )
    return KernelMapping(kernel, loops, mapped.staging, mapped.interleaved)


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
    certificates_checked: int = 0  # Farkas certificates of the last solution, checked exactly

    @classmethod
    def build(
        cls,
        kernel: Kernel,
        model: PolyModel,
        target: GpuTarget,
        pins: Pins,
        time_limit: float | None,
        staging: bool = True,
    ) -> KernelProblem:
        time_limit = checked_time_limit(time_limit)
        launches = _launches(kernel)
        candidates = stage_candidates(kernel, model.program) if staging else ()
        accesses = kernel_accesses(kernel, model, launches=launches)
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
        )

    def registers(self, mapping: KernelMapping) -> int:
        """The model's register estimate of a mapping (``_Variables._registers``)."""
        total = REGISTERS_BASE + self.local_elements
        staging = mapping.staging
        if mapping.interleaved:
            total += self.local_elements * (mapping.points - 1)
            for used in self.fragments:  # the values of a step, one per point they tell apart
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
        if not keys:
            raise InfeasibleMappingError(
                f"{self.kernel.name}: no mapping satisfies the limits of {self.target.name}"
                + self._capacity_hint()
            )
        conflict = list(keys)
        for key in keys:  # deletion filter: drop every pin the conflict survives without
            trial = [k for k in conflict if k != key]
            if self.solve(self._only(trial))[1] is None:
                conflict = trial
        described = "; ".join(f"'{k}' ({dict(self._pins_here())[k].describe()})" for k in conflict)
        raise InfeasibleMappingError(
            f"{self.kernel.name} (loops {', '.join(self.kernel.indices)}): the pins {described} conflict: "
            f"no mapping within the limits of {self.target.name} satisfies them together"
        )

    def _capacity_hint(self) -> str:
        """Why no mapping fits, when a loop is longer than the GPU can launch: the loop on x
        holds at most gridDim.x * blockDim * points per loop and thread, the others gridDim.y
        or .z times as much."""
        t = self.target
        per_block = 2 ** _log2(t.max_threads_per_block) * 2**MAX_LOG_SEQ
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
            scip = Model(f"polymap.{self.kernel.name}")
            scip.hideOutput()
            for param, value in MAPPING_SCIP_PARAMS.items():
                scip.setParam(param, value)
            v = _Variables(self, scip, pins)
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
        step = {m.index: 1 if m.distribution is Distribution.CYCLIC else m.seq for m in mapping.loops}
        delta = {m.index: step[m.index] if m.thread_axis is Axis.X else 0 for m in mapping.loops}
        x_threads = next((m.threads for m in mapping.loops if m.thread_axis is Axis.X), t.warp_size)
        y_threads = next((m.threads for m in mapping.loops if m.thread_axis is Axis.Y), 1)
        wrap = x_threads < t.warp_size  # the warp wraps into rows along the y loop
        beyond_y = x_threads * y_threads < t.warp_size  # and into z: a sector per lane
        delta_y = {m.index: step[m.index] if m.thread_axis is Axis.Y else 0 for m in mapping.loops}
        staged = self._staged(mapping)
        spans = {m.index: m.threads * m.seq for m in mapping.loops}
        rows, total_bytes, shared, wavefronts = [], 0.0, 0, 0.0
        instructions = fma_instructions(t, self.flops)
        for a in self.accesses:
            stride = a.exact_stride(delta)
            if beyond_y:
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
            from_shared = any(c.serves(a.statement, a.buffer, a.is_write) for c in staged)
            moved = 0 if from_shared else sectors * t.sector_bytes * requests
            shown = requests
            instructions += requests  # a global load or store per warp request
            if from_shared:  # interleaved points share each read of a value (``point_reuse``)
                reads = requests / (point_reuse(a, mapping) if mapping.interleaved else 1)
                wavefronts += reads * shared_wavefronts(t, a.element_bytes)
                instructions += reads - requests  # shared loads instead
                shown = math.ceil(reads)
            rows.append(
                AccessCost(a.statement, a.text, a.is_write, stride, sectors, shown, moved, from_shared)
            )
            total_bytes += 0 if from_shared else a.instances * sectors
        for c in staged:
            moved = self.staged_bytes(c, spans)
            wavefronts += tile_store_wavefronts(t, moved, c.element_bytes)
            instructions += copy_instructions(t, moved, c.element_bytes)
            widths = tuple(mapping.staging.tile if v == c.loop else spans.get(v, 1) for v in c.dims)
            tile = "x".join(map(str, widths))
            shared += StagedBuffer(c, widths).bytes
            rows.append(
                AccessCost(
                    "copy",
                    f"{c.buffer} tile [{tile}]",
                    False,
                    1,
                    1,
                    math.ceil(moved / t.sector_bytes),
                    math.ceil(moved),
                    False,
                )
            )
            total_bytes += moved
        threads = mapping.threads_per_block * mapping.blocks
        fill = fill_fraction(t, mapping, self.extents)
        memory_s = total_bytes / t.dram_bandwidth
        compute_s = self.flops / t.peak_fp32_flops
        shared_s = wavefronts / shared_wavefront_rate(t)
        issue_s = instructions / issue_rate(t)
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
            max(memory_s, compute_s, shared_s, issue_s) / fill,
            self.launches,
            shared,
            self.registers(mapping),
            shared_s,
            RANKING_WEIGHT * (memory_s + shared_s) / fill,
            issue_s,
        )

    def _staged(self, mapping: KernelMapping) -> list[StageCandidate]:
        if mapping.staging is None:
            return []
        return [
            c
            for c in self.candidates
            if c.loop == mapping.staging.loop and c.buffer in mapping.staging.buffers
        ]


def reuse_loops(access: GlobalAccess, band: tuple[str, ...]) -> tuple[str, ...]:
    """The band loops whose points all read the same element of ``access`` in one step: those
    its indices do not mention. Where a thread's points interleave (``KernelMapping``), one
    read of the element serves them all (the compiler keeps the value in a register)."""
    used = set()
    for e in access.indices:
        used |= index_vars(e)
    return tuple(index for index in band if index not in used)


def point_reuse(access: GlobalAccess, mapping: KernelMapping) -> int:
    """How many of an interleaved thread's points share each read of ``access``."""
    loops = reuse_loops(access, mapping.kernel.indices)
    return math.prod(m.seq for m in mapping.loops if m.index in loops)


def shared_capacity(target: GpuTarget, threads_per_block: int) -> int:
    """Shared memory a block may use without the opt-in, and without holding fewer blocks
    per SM than its thread count allows (``shared per SM * block / threads per SM``)."""
    return min(
        target.shared_memory_per_block,
        target.shared_memory_per_sm * threads_per_block // target.max_threads_per_sm,
    )


def fill_fraction(target: GpuTarget, mapping: KernelMapping, extents: tuple[int, ...]) -> float:
    """The fraction of the GPU a launch keeps busy, in the model's form (``_Variables._time``:
    prod N / prod S threads, or prod N independent points where they interleave, against the
    GPU's thread slots; prod N / prod T S blocks against its SMs; the thread slots that blocks
    of this size can hold), whatever the rounding up."""
    work = math.prod(extents)
    in_flight = work if mapping.interleaved else work / mapping.points
    span = math.prod(m.threads * m.seq for m in mapping.loops)
    return min(
        1.0,
        in_flight / (target.sm_count * target.max_threads_per_sm),
        work / span / target.sm_count,
        1 / occupancy_penalty(target, mapping.threads_per_block),
    )


def occupancy_penalty(target: GpuTarget, threads_per_block: int) -> float:
    """1 / the fraction of an SM's thread slots that blocks of this size can occupy."""
    resident = min(target.max_threads_per_sm, target.max_blocks_per_sm * threads_per_block)
    return target.max_threads_per_sm / resident


def sectors_per_request(stride: int, element_bytes: int, *, lanes: int, sector: int) -> int:
    """Sectors of ``sector`` bytes touched by one warp of ``lanes`` lanes ``stride`` elements apart."""
    span = (lanes - 1) * abs(stride) * element_bytes + element_bytes
    return min(lanes, max(1, -(-span // sector)))


def wrapped_sectors(
    stride: int, row_stride: int, element_bytes: int, *, lanes: int, warp: int, sector: int
) -> int:
    """Sectors touched by one warp that covers ``lanes`` lanes ``stride`` elements apart in
    each of ``warp / lanes`` rows ``row_stride`` elements apart: at most the sectors of its
    whole span, at most the rows times the sectors of one row, at most the lanes times the
    sectors of one column, at most one per lane."""
    count = warp // lanes
    row = (lanes - 1) * abs(stride) * element_bytes + element_bytes
    column = (count - 1) * abs(row_stride) * element_bytes + element_bytes
    span = row + column - element_bytes
    return max(1, min(warp, -(-span // sector), count * -(-row // sector), lanes * -(-column // sector)))


class _Variables:
    """Adds the decision variables and constraints of one kernel to a SCIP model, one method
    per constraint group; every hardware limit is read from the kernel's ``GpuTarget``."""

    def __init__(self, problem: KernelProblem, scip: Model, pins: Pins) -> None:
        self.p = problem
        self.scip = scip
        t = problem.target
        band = problem.kernel.band
        self.n = len(band)
        self.log_warp = _log2(t.warp_size)  # a power of two (GpuTarget.check)
        self.log_block = _log2(t.max_threads_per_block)  # block sizes are powers of two
        self.certificates: list = []  # (access, Farkas system, its SCIP variables)
        pinned = {loop.index: _merge(pins.for_loop(problem.kernel.name, loop.index)) for loop in band}
        self.pinned = any(pins.for_loop(problem.kernel.name, loop.index) for loop in band)
        caps = [max(0, math.ceil(math.log2(n))) if n > 1 else 0 for n in problem.extents]
        for j, loop in enumerate(band):
            pin = pinned[loop.index]
            if pin.threads or pin.seq:  # a pinned size may overshoot: the guard handles it
                caps[j] = max(caps[j], _log2(pin.threads or 1) + _log2(pin.seq or 1))
        # fewer iterations than a warp: the block is exactly one warp, guarded
        self.tiny = sum(caps) < self.log_warp
        self.caps = tuple(caps)
        self._decisions()
        self._loop_limits(caps, pinned)
        self._block_limits()
        deltas = self._lane_steps()
        rows = self._warp_rows(caps)
        traffic = self._coalescing(deltas, rows)
        p_log = {loop.index: self.lt[j] + self.ls[j] for j, loop in enumerate(band)}
        block = self._block_size()
        traffic = self._staging(scip, pins, traffic, p_log, block)
        self._registers(scip, quicksum(self.ls[j] for j in range(self.n)), block)
        time, traffic_time = self._time(traffic, block)
        self._objective(time, traffic_time)
        # the fill's products with the traffic relax weakly until the points per thread and
        # their order are fixed: SCIP branches on those first (the four-deep band of
        # tests/test_fold.py: proved optimal in 2 s, a 1700% gap at 30 s without; with the
        # threads and block sizes too, it was back at 30 s: measured, not derived)
        for var in [*self.us.values(), self.inter]:
            scip.chgVarBranchPriority(var, 10)

    def _decisions(self) -> None:
        """The binaries of every band loop: thread axis, block axis, log2 T, log2 S, cyclic."""
        scip, band = self.scip, self.p.kernel.band
        self.ax = {
            (j, a): scip.addVar(f"ax[{loop.index},{a.value}]", vtype="B")
            for j, loop in enumerate(band)
            for a in Axis
        }
        self.bx = {
            (j, a): scip.addVar(f"bx[{loop.index},{a.value}]", vtype="B")
            for j, loop in enumerate(band)
            for a in Axis
        }
        self.ut = {
            (j, k): scip.addVar(f"ut[{loop.index},{k}]", vtype="B")
            for j, loop in enumerate(band)
            for k in range(self.log_block + 1)
        }
        self.us = {
            (j, m): scip.addVar(f"us[{loop.index},{m}]", vtype="B")
            for j, loop in enumerate(band)
            for m in range(MAX_LOG_SEQ + 1)
        }
        self.cyc = {j: scip.addVar(f"cyclic[{loop.index}]", vtype="B") for j, loop in enumerate(band)}
        # the thread's points interleave: every step of the body runs all of them
        self.inter = scip.addVar("interleaved", vtype="B", ub=1 if interleavable(self.p.kernel) else 0)
        self.lt = {j: quicksum(k * self.ut[j, k] for k in range(self.log_block + 1)) for j in range(self.n)}
        self.ls = {j: quicksum(m * self.us[j, m] for m in range(MAX_LOG_SEQ + 1)) for j in range(self.n)}
        self.seq = {
            j: scip.addVar(f"S[{band[j].index}]", vtype="I", lb=1, ub=2**MAX_LOG_SEQ) for j in range(self.n)
        }
        for j in range(self.n):
            scip.addCons(quicksum(self.ax[j, a] for a in Axis) == 1)
            scip.addCons(quicksum(self.bx[j, a] for a in Axis) == 1)
            scip.addCons(quicksum(self.ut[j, k] for k in range(self.log_block + 1)) == 1)
            scip.addCons(quicksum(self.us[j, m] for m in range(MAX_LOG_SEQ + 1)) == 1)
            scip.addCons(self.seq[j] == quicksum(2**m * self.us[j, m] for m in range(MAX_LOG_SEQ + 1)))
        # threadIdx.x always holds a loop: it decides which loop's iterations are neighbours in a warp
        scip.addCons(quicksum(self.ax[j, Axis.X] for j in range(self.n)) == 1)
        for a in Axis:
            scip.addCons(quicksum(self.ax[j, a] for j in range(self.n)) <= 1)
            scip.addCons(quicksum(self.bx[j, a] for j in range(self.n)) <= 1)

    def _loop_limits(self, caps: list[int], pinned: dict[str, LoopPin]) -> None:
        """Per loop: blockDim and gridDim of its axes within the target's limits, T_j S_j not
        beyond the next power of two of N_j, the x loop at least a warp wide (or its whole
        extent), and the pins."""
        scip, p, t = self.scip, self.p, self.p.target
        for j, loop in enumerate(p.kernel.band):
            lt, ls = self.lt[j], self.ls[j]
            for a, most in zip(Axis, t.block_dim_limits):
                scip.addCons(lt <= _log2(most) + self.log_block * (1 - self.ax[j, a]))
            if self.tiny:
                scip.addCons(ls == 0)
            else:
                scip.addCons(lt + ls <= caps[j])
                scip.addCons(lt >= min(self.log_warp, caps[j]) * self.ax[j, Axis.X])
            for a, most in zip(Axis, t.grid_dim_limits):
                # ceil(N_j / (T_j S_j)) blocks on axis a: T_j S_j >= N_j / most
                need = _grid_need(p.extents[j], most)
                if need:
                    scip.addCons(lt + ls >= need * self.bx[j, a])
            self._pin(scip, j, pinned[loop.index], lt, ls)

    def _block_limits(self) -> None:
        """A block of at least a warp (exactly one for a tiny kernel) and at most
        ``max_threads_per_block`` threads; at most ``2^MAX_LOG_SEQ_TOTAL`` points per thread."""
        scip = self.scip
        self.total_lt = quicksum(self.lt[j] for j in range(self.n))
        if self.tiny:
            scip.addCons(self.total_lt == self.log_warp)
        else:
            scip.addCons(self.total_lt >= self.log_warp)
            scip.addCons(self.total_lt <= self.log_block)
        scip.addCons(quicksum(self.ls[j] for j in range(self.n)) <= MAX_LOG_SEQ_TOTAL)

    def _lane_steps(self) -> dict[str, object]:
        """step_j = 1 (cyclic) or S_j (blocked); delta_j = step_j on the x loop, else 0."""
        scip = self.scip
        deltas = {}
        self.steps = {}
        for j, loop in enumerate(self.p.kernel.band):
            step = scip.addVar(f"step[{loop.index}]", vtype="I", lb=1, ub=2**MAX_LOG_SEQ)
            scip.addCons(step == self.cyc[j] + self.seq[j] - self.cyc[j] * self.seq[j])
            delta = scip.addVar(f"delta[{loop.index}]", vtype="I", lb=0, ub=2**MAX_LOG_SEQ)
            scip.addCons(delta == self.ax[j, Axis.X] * step)
            deltas[loop.index] = delta
            self.steps[j] = step
        return deltas

    def _warp_rows(self, caps: list[int]) -> dict[int, object]:
        """A warp is the first ``warp_size`` linear thread ids: along x while the x loop has a
        warp of threads or more; when it has ``T_x = 2^k`` fewer, the warp wraps into
        ``warp / T_x`` rows along the y loop, or further into z when y has fewer. Returns
        ``{k: (W_k, H_k)}``, ``W_k = 1`` when the x loop has ``2^k < warp`` threads, ``H_k = 1``
        when the y loop holds the rows, for the k the limits allow (none when every loop that
        may be on x has a warp of iterations); and
        sets ``self.y_deltas``, the steps between rows (``delta_j = step_j`` on the y loop)."""
        scip, band = self.scip, self.p.kernel.band
        self.y_deltas = {}
        rows = {}
        for k in range(self.log_warp):
            # off the tiny case the x loop runs min(warp, its whole extent) threads: k = caps[j]
            loops = [j for j in range(self.n) if self.tiny or caps[j] == k]
            if not loops:
                continue
            w = []
            for j in loops:
                var = scip.addVar(f"wrap[{band[j].index},{k}]", vtype="B")  # x loop j with 2^k threads
                scip.addCons(var <= self.ax[j, Axis.X])
                scip.addCons(var <= self.ut[j, k])
                scip.addCons(var >= self.ax[j, Axis.X] + self.ut[j, k] - 1)
                w.append(var)
            on = quicksum(w)
            # H_k = 1: the y loop holds the warp's rows, T_y >= warp / 2^k. Without it (a small
            # 3-D band: 4 x 4 x 4 threads) the warp spans z too and is charged a sector per lane
            held = scip.addVar(f"rows_in_y[{k}]", vtype="B")
            scip.addCons(held <= on)
            scip.addCons(quicksum(self.ax[j, Axis.Y] for j in range(self.n)) >= held)
            for j in range(self.n):
                scip.addCons(self.lt[j] >= (self.log_warp - k) * (held + self.ax[j, Axis.Y] - 1))
            rows[k] = (on, held)
        if rows:
            for j, loop in enumerate(band):
                delta = scip.addVar(f"delta_y[{loop.index}]", vtype="I", lb=0, ub=2**MAX_LOG_SEQ)
                scip.addCons(delta == self.ax[j, Axis.Y] * self.steps[j])
                self.y_deltas[loop.index] = delta
        return rows

    def _coalescing(self, deltas: dict, rows: dict[int, object]) -> list:
        """Per global access: the lane stride D bounded by Farkas over the domain, and the
        sectors one warp request touches, ``sector * sigma >= (warp - 1) e D + e`` unless
        ``z`` (then ``sigma = warp``, one sector per lane). A warp that wraps into rows
        (``_warp_rows``) touches at most the sectors of its whole span, and at most its rows
        times the sectors of one row: the smaller bound holds (``_wrapped_sectors``).
        Returns the traffic terms."""
        scip, p, t = self.scip, self.p, self.p.target
        traffic = []
        self.sectors = []
        wrapped = quicksum(on for on, _ in rows.values()) if rows else 0
        for k, access in enumerate(p.accesses):
            bound = self._stride_bound(k, access, deltas, "D")
            sectors = scip.addVar(f"sigma[{access.statement}:{access.text}]", vtype="I", lb=1, ub=t.warp_size)
            wide = scip.addVar(f"z[{access.statement}:{access.text}]", vtype="B")
            e = access.element_bytes
            scip.addCons(sectors >= t.warp_size * wide)
            # the span bound holds unless z or a wrapped warp: an indicator, because a big-M
            # of the size of a row stride times SCIP's integrality tolerance (1e-7 on z) would
            # cancel the bound (seen: 2 sectors charged for 4)
            plain = scip.addVar(f"plain[{access.statement}:{access.text}]", vtype="B")
            scip.addCons(plain >= 1 - wide - wrapped)
            scip.addConsIndicator(t.sector_bytes * sectors - (t.warp_size - 1) * e * bound >= e, plain)
            for on, held in rows.values():  # a warp over x, y and z: a sector per lane
                scip.addCons(wide >= on - held)
            if rows:
                row_bound = self._stride_bound(k, access, self.y_deltas, "Dy", Axis.Y)
                self._wrapped_sectors(access, rows, sectors, wide, bound, row_bound)
            traffic.append(access.instances * sectors)
            self.sectors.append(sectors)
        return traffic

    def _stride_bound(self, k: int, access: GlobalAccess, deltas: dict, label: str, axis: Axis = Axis.X):
        """An integer ``>= |addr(x + delta) - addr(x)|`` over the domain, by Farkas, with
        ``delta`` the steps of the loop on ``axis``: a bound ``D_j`` per band loop
        (``accesses.py``), of which the bound takes the one of the loop on ``axis``, through
        an indicator: a big-M of the size of the address span times SCIP's integrality
        tolerance (ax = 1 - 1e-7) would swallow the stride."""
        scip = self.scip
        bound = scip.addVar(f"{label}[{access.statement}:{access.text}]", vtype="I", lb=0)
        position = {loop.index: j for j, loop in enumerate(self.p.kernel.band)}
        for index, symbol, systems in access.per_loop:
            own = scip.addVar(f"{label}[{access.statement}:{access.text}:{index}]", vtype="I", lb=0)
            self._add_systems(
                k, access, systems, {symbol: own, delta_symbol(index): deltas[index]}, f"{label}.{index}"
            )
            scip.addConsIndicator(own - bound <= 0, self.ax[position[index], axis])
        return bound

    def _add_systems(self, k: int, access: GlobalAccess, systems, theta: dict, label: str) -> None:
        for system in systems:
            lams = add_to_scip(
                system, self.scip, theta, name=f"{access.statement}.{k}.{label}.{system.prefix}"
            )
            self.certificates.append((access, system, {**theta, **lams}))

    def _wrapped_sectors(self, access: GlobalAccess, rows: dict, sectors, wide, bound, row_bound) -> None:
        """For each wrap of ``L = 2^k`` lanes x ``R = warp / 2^k`` rows, one of three bounds
        holds (or ``z``, one sector per lane), and minimizing takes the smallest:

        * the whole span: ``sector * sigma >= (L - 1) e D + (R - 1) e D_y + e``;
        * by rows: ``sigma >= R * rowsec``, ``sector * rowsec >= (L - 1) e D + e``;
        * by columns: ``sigma >= L * colsec``, ``sector * colsec >= (R - 1) e D_y + e``
          (lanes far apart, rows adjacent: a transpose's write).

        Every switch is an indicator: a row of a large stride spans more sectors than any
        constant big-M of a warp's sectors would allow, and big-Ms of a stride's size do not
        survive SCIP's integrality tolerance (see ``_coalescing``)."""
        scip, t = self.scip, self.p.target
        e = access.element_bytes
        tag = f"{access.statement}:{access.text}"
        for k, (_, held) in rows.items():
            lanes, count = 2**k, t.warp_size // 2**k
            wraps = scip.addVar(f"wraps[{tag},{k}]", vtype="B")
            scip.addCons(wraps == held)
            # a row or a column may span more than a warp of sectors: no upper bound
            rowsec = scip.addVar(f"rowsec[{tag},{k}]", vtype="I", lb=1, ub=None)
            colsec = scip.addVar(f"colsec[{tag},{k}]", vtype="I", lb=1, ub=None)
            scip.addConsIndicator(t.sector_bytes * rowsec - (lanes - 1) * e * bound >= e, wraps)
            scip.addConsIndicator(t.sector_bytes * colsec - (count - 1) * e * row_bound >= e, wraps)
            by = {
                name: scip.addVar(f"{name}bound[{tag},{k}]", vtype="B") for name in ("span", "row", "column")
            }
            scip.addCons(quicksum(by.values()) + wide >= wraps)
            scip.addConsIndicator(
                t.sector_bytes * sectors - (lanes - 1) * e * bound - (count - 1) * e * row_bound >= e,
                by["span"],
            )
            scip.addConsIndicator(sectors - count * rowsec >= 0, by["row"])
            scip.addConsIndicator(sectors - lanes * colsec >= 0, by["column"])

    def _block_size(self) -> dict[int, object]:
        """One binary per log2 of the block's thread count."""
        scip = self.scip
        block = {v: scip.addVar(f"block_log2={v}", vtype="B") for v in range(self.log_block + 1)}
        scip.addCons(quicksum(block.values()) == 1)
        scip.addCons(quicksum(v * block[v] for v in block) == self.total_lt)
        return block

    def _time(self, traffic: list, block: dict):
        """The roofline time in microseconds (DRAM, FP32 and shared-memory roofs), divided by
        the fraction of the GPU filled, and the sum of the DRAM and shared-memory times (each
        divided by the fill), which the objective ranks ties by (``fill_fraction``):
        ``u >= 1``; ``u >= SMs * threads per SM * prod S_j / prod N_j`` unless the points
        interleave (then ``u >= SMs * threads per SM / prod N_j``: each point is independent
        work in flight, as a thread is); ``u >= SMs * prod T_j S_j / prod N_j`` (fewer blocks
        than SMs) and ``u >= threads per SM / (blocks per SM * threads per block)``."""
        scip, p, t = self.scip, self.p, self.p.target
        capacity = t.sm_count * t.max_threads_per_sm
        prod_s = self.seq[0]
        for j in range(1, self.n):
            nxt = scip.addVar(f"prodS[{j}]", vtype="I", lb=1, ub=2**MAX_LOG_SEQ_TOTAL)
            scip.addCons(nxt == prod_s * self.seq[j])
            prod_s = nxt
        u = scip.addVar("underfill", vtype="C", lb=1.0)
        extents = math.prod(p.extents)
        scip.addCons(u >= capacity / extents)
        # prod S threads fewer unless interleaved (a big-M of 64 points: prod S <= 64)
        scip.addCons(extents * u >= capacity * (prod_s - 2**MAX_LOG_SEQ_TOTAL * self.inter))
        # a block runs on one SM: fewer blocks than SMs leave SMs idle
        logs = quicksum(self.lt[j] + self.ls[j] for j in range(self.n))
        top = self.log_block + MAX_LOG_SEQ_TOTAL
        span = {m: scip.addVar(f"block_span_log2={m}", vtype="B") for m in range(top + 1)}
        scip.addCons(quicksum(span.values()) == 1)
        scip.addCons(quicksum(m * var for m, var in span.items()) == logs)
        scip.addCons(u >= quicksum(t.sm_count * 2.0**m / extents * var for m, var in span.items()))
        # occupancy: an SM holds at most max_blocks_per_sm blocks, so small blocks leave
        # thread slots empty
        scip.addCons(u >= quicksum(occupancy_penalty(t, 2**v) * block[v] for v in block))
        time = scip.addVar("time_us", vtype="C", lb=0.0)
        memory = scip.addVar("memory_us", vtype="C", lb=0.0)
        scip.addCons(memory >= u * quicksum(traffic) * (1e6 / t.dram_bandwidth))
        scip.addCons(time >= memory)
        scip.addCons(time >= u * (p.flops * 1e6 / t.peak_fp32_flops))
        issue = scip.addVar("issue_us", vtype="C", lb=0.0)
        base = fma_instructions(t, p.flops) + sum(-(-a.instances // t.warp_size) for a in p.accesses)
        scip.addCons(issue >= u * (base + quicksum(self.instructions)) * (1e6 / issue_rate(t)))
        scip.addCons(time >= issue)
        if not self.wavefronts:
            return time, memory
        shared = scip.addVar("shared_us", vtype="C", lb=0.0)
        scip.addCons(shared >= u * quicksum(self.wavefronts) * (1e6 / shared_wavefront_rate(t)))
        scip.addCons(time >= shared)
        return time, memory + shared

    def _objective(self, time, traffic_time) -> None:
        """The time, plus ``RANKING_WEIGHT`` times the DRAM and shared-memory times (mappings
        under the same roof ranked by the traffic they add), plus a tie-break far below any
        real cost difference."""
        scip, n = self.scip, self.n
        axes = list(Axis)
        same = [scip.addVar(f"same[{j},{a.value}]", vtype="B") for j in range(n) for a in axes]
        for idx, var in enumerate(same):
            j, a = divmod(idx, 3)
            scip.addCons(var <= self.ax[j, axes[a]])
            scip.addCons(var <= self.bx[j, axes[a]])
        # ties: block axes equal to thread axes, fewer points per thread, larger tiles (fewer barriers),
        # and, between mappings that cost the same, lower thread axes and blocked points, so
        # that the answer does not depend on which of the tied optima SCIP meets first
        order = quicksum(
            a.position * self.ax[j, a] + a.position * self.bx[j, a] for j in range(n) for a in axes
        )
        tie = TIE_BREAK * (
            n
            - quicksum(same)
            + quicksum(self.ls[j] for j in range(n))
            + MAX_LOG_TILE
            - self.log_tile
            + self.inter
            + 0.01 * (order + quicksum(self.cyc.values()))
        )
        scip.setObjective(time + RANKING_WEIGHT * traffic_time + tie, "minimize")

    def _staging(self, scip: Model, pins: Pins, traffic: list, p_log: dict, block: dict) -> list:
        """Shared-memory staging (``staging.py``): a binary per scope (a tileable seq loop or
        the whole body; at most one), the tile ``K = 2^kappa``, and per candidate buffer a
        binary ``st``. A staged buffer's reads in the scope cost nothing from global memory;
        its copies move ``e * prod N_j * N_L * 2^-(sum of log2 T_j S_j over the band loops
        its tile does not follow)`` bytes (an indicator per value of that sum); its tile of
        ``e * 2^(sum of the logs of the widths)`` bytes (padded) counts against
        ``shared_capacity``, and its rows are at least a sector wide. Returns the traffic
        terms with those of the staged reads switched off."""
        p, t = self.p, self.p.target
        kname = p.kernel.name
        scope_extent = dict(p.scope_extents)
        self.scope, self.stage = {}, {}
        self.wavefronts = []  # shared-memory wavefronts: staged reads and the tiles' stores
        self.instructions = []  # warp instructions beyond one per global request and FMA
        kappa_values = range(MAX_LOG_TILE + 1)
        self.kappa = {m: scip.addVar(f"tile_log2={m}", vtype="B") for m in kappa_values}
        scip.addCons(quicksum(self.kappa.values()) == 1)
        self.log_tile = quicksum(m * var for m, var in self.kappa.items())
        if not p.candidates:
            return traffic
        for c in p.candidates:
            if c.loop not in self.scope:
                self.scope[c.loop] = scip.addVar(f"scope[{c.loop or 'body'}]", vtype="B")
        scip.addCons(quicksum(self.scope.values()) <= 1)
        if None in self.scope:  # the whole body is one tile: K = 1
            scip.addCons(self.log_tile <= MAX_LOG_TILE * (1 - self.scope[None]))
        for loop, extent in scope_extent.items():
            if loop in self.scope:
                cap = max(0, math.ceil(math.log2(extent))) if extent > 1 else 0
                scip.addCons(self.log_tile <= cap + MAX_LOG_TILE * (1 - self.scope[loop]))
        for loop in self.scope:
            if loop is None:
                continue
            pin = _merge(pins.for_loop(kname, loop))
            if pin.tile is not None:
                scip.addCons(self.log_tile == _log2(pin.tile))
            if pin.stage is not None:
                scip.addCons(self.scope[loop] == (1 if pin.stage else 0))
        shared_terms = []
        for c in p.candidates:
            st = scip.addVar(f"stage[{c.buffer}@{c.loop or 'body'}]", vtype="B")
            self.stage[c.buffer, c.loop] = st
            scip.addCons(st <= self.scope[c.loop])
            if c.loop is not None:
                pin = _merge(pins.for_loop(kname, c.loop))
                if pin.stage is not None:
                    scip.addCons(st == (1 if c.buffer in pin.stage else 0))
            width_log = {v: (self.log_tile if v == c.loop else p_log[v]) for v in c.loops}
            # rows of at least one 32-byte sector
            row = max(0, math.ceil(math.log2(t.sector_bytes / c.element_bytes)))
            scip.addCons(width_log[c.dims[-1]] >= row * st)
            # global traffic of the copies
            outside = [v for v in p.kernel.indices if v not in c.dims]
            top = len(outside) * (self.log_block + MAX_LOG_SEQ)
            full = self.p.staged_bytes(c, dict.fromkeys(p.kernel.indices, 1))
            # y[m] = 1 for m = sum of the logs (when staged; all 0 otherwise): a smaller m means
            # more traffic, so the minimum takes the largest m allowed, the exact one
            y = {m: scip.addVar(f"outlog[{c.buffer}]={m}", vtype="B") for m in range(top + 1)}
            scip.addCons(quicksum(y.values()) == st)
            scip.addCons(quicksum(m * var for m, var in y.items()) <= quicksum(p_log[v] for v in outside))
            copied = quicksum(full * 2.0**-m * var for m, var in y.items())
            traffic.append(copied)
            self.wavefronts.append(tile_store_wavefronts(t, 1.0, c.element_bytes) * copied)
            self.instructions.append(copy_instructions(t, 1.0, c.element_bytes) * copied)
            # the staged reads leave global memory for shared memory
            for k, a in enumerate(p.accesses):
                if c.serves(a.statement, a.buffer, a.is_write):
                    reads = self._staged_reads(scip, a, st)
                    self.wavefronts.append(shared_wavefronts(t, a.element_bytes) * reads)
                    # a shared load where staged, a global one (counted in _time) where not
                    requests = -(-a.instances // t.warp_size)
                    self.instructions.append(reads - requests * st)
                    sectors = self.sectors[k]
                    left = scip.addVar(
                        f"sigma_global[{a.statement}:{a.text}]", vtype="I", lb=0, ub=t.warp_size
                    )
                    scip.addCons(left >= sectors - t.warp_size * st)  # 0 when staged
                    traffic[k] = a.instances * left
            # shared memory of the tile
            widths = quicksum(width_log.values())
            top_w = sum(self.log_block + MAX_LOG_SEQ for v in c.loops if v != c.loop)
            top_w += MAX_LOG_TILE if c.loop in c.dims else 0
            # z[m] = 1 for m >= the log of the tile's elements (when staged; all 0 otherwise)
            z = {m: scip.addVar(f"tilelog[{c.buffer}]={m}", vtype="B") for m in range(top_w + 1)}
            scip.addCons(quicksum(z.values()) == st)
            scip.addCons(quicksum(m * var for m, var in z.items()) >= widths - top_w * (1 - st))
            shared_terms.append(quicksum(c.element_bytes * PADDING * 2.0**m * var for m, var in z.items()))
        capacity = quicksum(shared_capacity(t, 2**v) * var for v, var in block.items())
        scip.addCons(quicksum(shared_terms) <= capacity)
        return traffic

    def _staged_reads(self, scip: Model, a: GlobalAccess, st):
        """Warp reads of one staged read (shared-load instructions): one per 32 instances;
        where the points interleave, divided by the points that share each read
        (``point_reuse``: ``2^m`` with m the sum of the log2 S_j of the loops the read does not
        mention). ``g = st * interleaved``; ``y[m]`` as in ``_staging``: the smaller m costs
        more, so the minimum takes the exact one."""
        t = self.p.target
        full = -(-a.instances // t.warp_size)
        position = {loop.index: j for j, loop in enumerate(self.p.kernel.band)}
        loops = [position[v] for v in reuse_loops(a, self.p.kernel.indices)]
        if not loops:
            return full * st
        tag = f"{a.statement}:{a.text}"
        g = scip.addVar(f"reused[{tag}]", vtype="B")
        scip.addCons(g <= st)
        scip.addCons(g <= self.inter)
        scip.addCons(g >= st + self.inter - 1)
        top = len(loops) * MAX_LOG_SEQ
        y = {m: scip.addVar(f"reuselog[{tag}]={m}", vtype="B") for m in range(top + 1)}
        scip.addCons(quicksum(y.values()) == g)
        scip.addCons(quicksum(m * var for m, var in y.items()) <= quicksum(self.ls[j] for j in loops))
        return full * (st - g) + quicksum(full * 2.0**-m * var for m, var in y.items())

    def _registers(self, scip: Model, log_points, block: dict) -> None:
        """An estimate of registers within the limits: ``REGISTERS_BASE`` plus the thread's
        block-local elements (accumulators), each held once per s-point where the points
        interleave (all of them) or a tiled loop runs outside the s-points (those outside
        it, ``staging.py``), and where the points interleave the values a step reads (a
        fragment: ``2^m - 1`` more per read inside a seq loop, m the sum of the log2 S_j of
        the loops it mentions); at most 255 per thread and the block's 65536 in all. Only a
        limit, not an occupancy cost: a thread with many accumulators hides latency by its
        independent operations, which the roofline does not model."""
        p, t = self.p, self.p.target
        if not p.local_elements and not p.fragments:
            scip.addCons(
                quicksum(2**v * var for v, var in block.items()) * (REGISTERS_BASE + p.local_elements)
                <= t.max_registers_per_block
            )
            return
        # points per thread 2^m: one binary per m, linear in the per-loop log decisions
        logs = {m: scip.addVar(f"points_log2={m}", vtype="B") for m in range(MAX_LOG_SEQ_TOTAL + 1)}
        scip.addCons(quicksum(logs.values()) == 1)
        scip.addCons(quicksum(m * var for m, var in logs.items()) == log_points)
        points = quicksum(2**m * var for m, var in logs.items())
        floor = REGISTERS_BASE + p.local_elements  # a body's own arrays may live in local memory
        most = max(t.max_registers_per_thread, floor)
        regs = scip.addVar("registers", vtype="I", lb=0, ub=most)

        def copies(on, label: str):  # points - 1 where ``on``, else 0
            x = scip.addVar(f"expanded[{label}]", vtype="I", lb=0, ub=2**MAX_LOG_SEQ_TOTAL)
            scip.addCons(x >= points - 1 - 2**MAX_LOG_SEQ_TOTAL * (1 - on))
            return x

        # per-point copies: of every local and the step's fragments where the points
        # interleave, else of the locals outside the tiled loop; the larger count holds
        scip.addCons(
            regs >= floor + p.local_elements * copies(self.inter, "interleaved") + self._fragments(scip)
        )
        for loop, elements in p.locals_outside:
            if loop in self.scope and elements:
                scip.addCons(regs >= floor + elements * copies(self.scope[loop], loop))
        for v, var in block.items():
            slack = 2**v * most
            scip.addCons(2**v * regs <= t.max_registers_per_block + slack * (1 - var))

    def _fragments(self, scip: Model):
        """The registers of a step's values beyond one per read, where the points interleave:
        per read (``KernelProblem.fragments``) ``2^m - 1`` with ``f[m] = 1`` for an m at least
        the sum of the log2 S_j of the loops it mentions (0 when not interleaved: all f are 0).
        A larger m only tightens the limit, so the exact one is always allowed."""
        position = {loop.index: j for j, loop in enumerate(self.p.kernel.band)}
        terms = []
        for r, used in enumerate(self.p.fragments):
            loops = [position[v] for v in used]
            if not loops:
                continue
            top = len(loops) * MAX_LOG_SEQ
            f = {m: scip.addVar(f"fragment[{r}]={m}", vtype="B") for m in range(top + 1)}
            scip.addCons(quicksum(f.values()) == self.inter)
            scip.addCons(
                quicksum(m * var for m, var in f.items())
                >= quicksum(self.ls[j] for j in loops) - top * (1 - self.inter)
            )
            terms.append(quicksum((2**m - 1) * var for m, var in f.items()))
        return quicksum(terms)

    def _pin(self, scip: Model, j: int, pin: LoopPin, lt, ls) -> None:
        if pin.thread_axis is not None:
            scip.addCons(self.ax[j, pin.thread_axis] == 1)
        if pin.block_axis is not None:
            scip.addCons(self.bx[j, pin.block_axis] == 1)
        if pin.threads is not None:
            scip.addCons(lt == _log2(pin.threads))
        if pin.seq is not None:
            scip.addCons(ls == _log2(pin.seq))
        if pin.distribution is not None:
            scip.addCons(self.cyc[j] == (1 if pin.distribution is Distribution.CYCLIC else 0))
        if pin.interleave is not None:  # the kernel's decision, pinned through one of its loops
            scip.addCons(self.inter == (1 if pin.interleave else 0))

    def suggest_start(self) -> bool:
        """Hand SCIP one plain mapping as a partial solution, before it solves: the innermost
        loop on x, the next on y, then z (the same axis for block and thread), about 256
        threads filled from x outwards, blocked, a point per thread unless the grid is too
        short for the loop, nothing staged. SCIP completes the rest of the variables
        (its completesol heuristic, before presolving) or drops the hint if it violates a
        constraint; either way the optimization and its bounds stay SCIP's. Without it, SCIP
        can search for seconds before its first feasible point on a folded triangular band
        (fuzz seed 4368: 6300 nodes, 10 s), and a time limit then ends with no mapping at
        all. Returns whether a hint was given: none for a pinned kernel (the pins decide)."""
        if self.pinned:
            return False
        t, n = self.p.target, self.n
        axes = (Axis.X, Axis.Y, Axis.Z)
        limits = [_log2(most) for most in t.block_dim_limits]
        left = self.log_warp if self.tiny else min(self.log_warp + 3, self.log_block, sum(self.caps))
        lt, ls = {}, {}
        for place, j in enumerate(reversed(range(n))):
            room = limits[place]
            lt[j] = min(room, left) if self.tiny else min(self.caps[j], room, left)
            left -= lt[j]
            need = _grid_need(self.p.extents[j], t.grid_dim_limits[place])
            ls[j] = 0 if self.tiny else max(0, need - lt[j])
        if left or any(m > MAX_LOG_SEQ for m in ls.values()) or sum(ls.values()) > MAX_LOG_SEQ_TOTAL:
            return False
        hint = self.scip.createPartialSol()
        for place, j in enumerate(reversed(range(n))):
            for a in Axis:
                self.scip.setSolVal(hint, self.ax[j, a], 1.0 if a is axes[place] else 0.0)
                self.scip.setSolVal(hint, self.bx[j, a], 1.0 if a is axes[place] else 0.0)
            for k in range(self.log_block + 1):
                self.scip.setSolVal(hint, self.ut[j, k], 1.0 if k == lt[j] else 0.0)
            for m in range(MAX_LOG_SEQ + 1):
                self.scip.setSolVal(hint, self.us[j, m], 1.0 if m == ls[j] else 0.0)
            self.scip.setSolVal(hint, self.cyc[j], 0.0)
        for st in self.stage.values():
            self.scip.setSolVal(hint, st, 0.0)
        self.scip.setSolVal(hint, self.inter, 0.0)
        self.scip.addSol(hint)
        # the hint fixes the decisions only; the multipliers and bounds (most of the
        # variables) are SCIP's to complete, beyond completesol's default share of unknowns
        self.scip.setParam("heuristics/completesol/maxunknownrate", 1.0)
        return True

    def check_certificates(self, scip: Model) -> int:
        """Check every Farkas certificate of SCIP's solution by exact substitution: the
        multipliers, rationalized, must be >= 0 and match every coefficient exactly. A
        failure is a bug (or a numerical breakdown in SCIP), reported loudly."""
        for access, system, variables in self.certificates:
            lams = set(system.multipliers)
            decisions = {s: round(scip.getVal(v)) for s, v in variables.items() if s not in lams}
            floats = {s: scip.getVal(v) for s, v in variables.items() if s in lams}
            if exact_certificate(system, decisions, floats) is None:
                raise InternalError(
                    f"{self.p.kernel.name}: SCIP's Farkas certificate for the lane stride of {access.text} "
                    f"({access.statement}) does not hold exactly at {decisions}"
                )
        return len(self.certificates)

    def read(self, scip: Model) -> KernelMapping:
        band = self.p.kernel.band
        loops = []
        for j, loop in enumerate(band):
            value = scip.getVal
            thread_axis = next(a for a in Axis if value(self.ax[j, a]) > 0.5)
            block_axis = next(a for a in Axis if value(self.bx[j, a]) > 0.5)
            lt = next(k for k in range(self.log_block + 1) if value(self.ut[j, k]) > 0.5)
            ls = next(m for m in range(MAX_LOG_SEQ + 1) if value(self.us[j, m]) > 0.5)
            dist = Distribution.CYCLIC if value(self.cyc[j]) > 0.5 else Distribution.BLOCKED
            loops.append(
                LoopMapping(
                    loop.index, thread_axis, block_axis, 2**lt, 2**ls, dist, loop.extent, self.p.extents[j]
                )
            )
        staged = [c for c in self.p.candidates if scip.getVal(self.stage[c.buffer, c.loop]) > 0.5]
        staging = None
        if staged:
            loop = staged[0].loop
            tile = 1 if loop is None else 2 ** next(m for m, v in self.kappa.items() if scip.getVal(v) > 0.5)
            staging = Staging(loop, tile, tuple(c.buffer for c in staged))
        return KernelMapping(self.p.kernel, tuple(loops), staging, scip.getVal(self.inter) > 0.5)


def _fragments(
    kernel: Kernel, model: PolyModel, accesses: tuple[GlobalAccess, ...]
) -> tuple[tuple[str, ...], ...]:
    """Per read of a statement inside a seq loop of the thread body, the band loops its indices
    mention (``KernelProblem.fragments``)."""
    outer = len(kernel.host_loops) + len(kernel.band)
    out = []
    for a in accesses:
        if not a.is_write and len(model.statement(a.statement).loops) > outer:
            unused = reuse_loops(a, kernel.indices)
            out.append(tuple(v for v in kernel.indices if v not in unused))
    return tuple(out)


def _grid_need(extent: int, most_blocks: int) -> int:
    """log2 of the points per block (T S) a loop of ``extent`` iterations needs so that its
    blocks fit a grid axis of at most ``most_blocks``: ceil(N / (T S)) <= most."""
    return max(0, math.ceil(math.log2(extent / most_blocks))) if extent > most_blocks else 0


def _merge(pins: tuple[tuple[str, LoopPin], ...]) -> LoopPin:
    """Several pins on one loop (``"j"`` and ``"kernel0.j"``) combine; a decision pinned to two
    values stays as the first and the solver's conflict search names both keys."""
    fields: dict = {}
    for _, pin in pins:
        for name, value in pin.items():
            fields.setdefault(name, value)
    return LoopPin(**fields)


def _log2(value: int) -> int:
    """The largest k with 2^k <= value (exact for powers of two; a limit that is not one,
    e.g. 768 threads per block, allows the powers of two below it)."""
    return value.bit_length() - 1


def _max_extents(kernel: Kernel, model: PolyModel) -> tuple[int, ...]:
    """The largest extent of each band loop over the domains of the kernel's statements."""
    out = []
    for position, loop in enumerate(kernel.band):
        depth = len(kernel.host_loops) + position  # statement dims: host loops, then the band
        best = 0
        for stmt in model.statements:
            if len(stmt.ctx.loops) > depth and stmt.ctx.loops[depth] is loop:
                dim_max = stmt.domain.dim_max(depth)
                if not stmt.domain.is_empty():
                    value = dim_max.max_val().to_python()
                    best = max(best, int(value) + 1)
        out.append(max(best, 1))
    return tuple(out)


def _elements(decls) -> int:
    """Elements of block-local buffers (a dimension that is not a number counts as 1)."""
    return sum(math.prod(const_value(e) or 1 for e in decl.shape) for decl in decls)


def _loop_extent(loop, model: PolyModel) -> int:
    """The largest extent of a seq loop of a thread body over the domains of its statements."""
    best = 0
    for stmt in model.statements:
        for depth, outer in enumerate(stmt.ctx.loops):
            if outer is loop and not stmt.domain.is_empty():
                best = max(best, int(stmt.domain.dim_max(depth).max_val().to_python()) + 1)
    return max(best, 1)


def _kernel_flops(kernel: Kernel, model: PolyModel) -> int:
    return sum(statement_flops(s) * model.instance_count(s.name) for s in kernel_statements(kernel))


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
