"""Thread mapping by SCIP: known answers, pins, conflicts, Farkas certificates, and the
optimum against brute-force enumeration of the same cost over the same decisions."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from pathlib import Path

import islpy as isl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polymap
import polymap.mapping.scip_model as scip_model_module
from polymap import parse
from polymap.errors import ArgumentError, InfeasibleMappingError, InternalError
from polymap.ir.parse import load
from polymap.mapping.caching import AGAIN
from polymap.mapping.cost_model import (
    MAX_LOG_SEQ,
    MAX_LOG_SEQ_TOTAL,
    MAX_LOG_TILE,
    PADDING,
    interleavable,
    most_blocks,
    shared_capacity,
    span_blocks,
)
from polymap.mapping.outcome import Outcome
from polymap.mapping.solve import KernelProblem, optimize
from polymap.mapping.space import Axis, Distribution, KernelMapping, LoopMapping, Pins, Staging, kernels
from polymap.poly.model import analyze
from polymap.prove import verify
from polymap.targets import H100

MODELS = Path(__file__).resolve().parent.parent / "models"
# H100's limits, restated for the enumeration oracle: a warp of 2^5 threads, blocks of up to
# 2^10 threads, blockDim.z up to 2^6, gridDim.y and .z up to 65535
LOG_WARP, MAX_LOG_THREADS, MAX_LOG_Z, GRID_YZ = 5, 10, 6, 65535
assert (2**LOG_WARP, 2**MAX_LOG_THREADS, 2**MAX_LOG_Z, GRID_YZ) == (
    H100.warp_size,
    H100.max_threads_per_block,
    H100.max_block_dim_z,
    H100.max_grid_dim_y,
)
# and its registers: 255 per thread, 65536 per block
REGISTERS_PER_THREAD, REGISTERS_PER_BLOCK = 255, 65536
assert (REGISTERS_PER_THREAD, REGISTERS_PER_BLOCK) == (
    H100.max_registers_per_thread,
    H100.max_registers_per_block,
)

MATMUL = """
param M, N, K
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { C[i, j] = 0; seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""


def _x_loop(mapping, kernel: int = 0) -> str:
    return next(m.index for m in mapping.kernels[kernel].loops if m.thread_axis is Axis.X)


def _access(mapping, text: str, kernel: int = 0):
    return next(a for a in mapping.costs[kernel].accesses if a.access == text)


# ----------------------------------------------------------------- known answers


def test_matmul_puts_j_on_threadIdx_x():
    mapping = optimize(load(MODELS / "matmul_1024.te"))
    assert _x_loop(mapping) == "j"
    assert mapping.kernels[0].loop("i").thread_axis.value == "y"  # the lowest axis, of equal costs
    assert _access(mapping, "A[i, k]").lane_stride == 0  # a broadcast
    # from global memory (no staging), B's reads are coalesced: 32 lanes x 4 bytes
    unstaged = optimize(load(MODELS / "matmul_1024.te"), staging=False)
    assert _x_loop(unstaged) == "j"
    assert _access(unstaged, "B[k, j]").sectors_per_request == 4
    report = mapping.solver[0]
    assert report.status == "optimal" and report.gap == 0
    assert report.dual_bound == pytest.approx(report.objective, rel=1e-9)


def test_mappings_under_the_same_roof_are_ranked_by_the_traffic_they_add():
    """A 4096^3 matmul with its points run one after another is under its shared-memory roof
    whichever loop is on x; SCIP's objective adds 1% of the memory and shared-memory times, so i
    on x (32 sectors per write of C) loses. (At 1024^3 the operands stay in L2, and an
    unstaged operand read from there binds instead: ``test_caching.py``.)"""
    program = load(MODELS / "matmul_1024.te").bind(M=4096, N=4096, K=4096)
    mapping = optimize(program, pins={"i": {"interleave": False}})
    cost = mapping.costs[0]
    assert cost.shared_s > cost.memory_s and cost.shared_s > cost.compute_s
    assert cost.ranking_s == pytest.approx(0.01 * (cost.memory_s + cost.shared_s) / cost.fill, rel=1e-12)
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6, rel=1e-6)
    pinned = optimize(program, pins={"i": {"thread": "x", "interleave": False}})
    assert pinned.costs[0].time_s == pytest.approx(cost.time_s, rel=1e-9)  # the same roof binds
    assert pinned.costs[0].memory_s > cost.memory_s
    assert pinned.solver[0].objective > mapping.solver[0].objective
    line = next(x for x in str(mapping).splitlines() if "SCIP optimal" in x)
    assert (
        f"(predicted {cost.time_s * 1e6:.6g} us + {cost.ranking_s * 1e6:.4g} us: 1% of the memory and shared-memory times"
        in line
    )


def test_stride_32_matmul_keeps_the_strided_access_off_threadIdx_x():
    mapping = optimize(load(MODELS / "matmul_strided_a.te"))
    assert _x_loop(mapping) == "j"
    assert _access(mapping, "A[i, 32 * k]").lane_stride == 0
    # on x, i would put 32 * K floats between neighbouring lanes of A: one sector per lane
    pinned = optimize(load(MODELS / "matmul_strided_a.te"), pins={"i": "threadIdx.x"})
    assert _access(pinned, "A[i, 32 * k]").sectors_per_request == 32
    assert pinned.costs[0].time_s > mapping.costs[0].time_s


def test_transpose_stages_its_tile_in_shared_memory():
    mapping = optimize(load(MODELS / "transpose.te"))
    staging = mapping.kernels[0].staging
    assert staging is not None and staging.buffers == ("A",) and staging.loop is None
    rows = {a.access: a for a in mapping.costs[0].accesses}
    assert rows["A[i, j]"].from_shared and rows["A[i, j]"].bytes == 0
    assert rows["B[j, i]"].sectors_per_request == 4  # the write is coalesced
    # the copy moves each element of A once: 4096 x 4096 floats
    copy = next(a for a in mapping.costs[0].accesses if a.statement == "copy")
    assert copy.bytes == 4096 * 4096 * 4
    unstaged = optimize(load(MODELS / "transpose.te"), staging=False)
    assert mapping.costs[0].time_s < unstaged.costs[0].time_s
    assert "shared memory: A staged in shared memory over the whole body" in str(mapping)


def test_transpose_without_staging_is_reported_with_its_uncoalesced_cost():
    mapping = optimize(load(MODELS / "transpose.te"), staging=False)
    sectors = sorted(a.sectors_per_request for a in mapping.costs[0].accesses)
    assert sectors == [4, 32]  # one side coalesced, the other one sector per lane
    text = str(mapping)
    assert re.search(r"\s32\s+\d+\s+\d+", text)  # the 32-sector access is in the cost table


# a warp per output ties with a thread per output at these sizes (both wait 1.3 us for their
# first loads; A and B stay in L2): these tests read a thread per output
THREAD_PER_OUTPUT = {"i": {"lanes": 1}}


def test_optimize_report_has_loop_nest_cost_table_and_solver_line():
    mapping = optimize(parse(MATMUL, name="mm").bind(M=64, N=64, K=16), pins=THREAD_PER_OUTPUT)
    text = str(mapping)
    assert "j = blockIdx.x" in text and "threadIdx.x" in text
    # the accumulator C[i, j] is kept in a register that starts at 0 (C[i, j] = 0 forwarded):
    # B is read by S1, C is only written, by S2
    assert re.search(r"read B\[k, j\](?: \(shared\))?\s+S1\s+1\s+4", text)
    assert "new C_acc: f32" in text and "C_acc = 0" in text and "read C[i, j]" not in text
    assert re.search(
        r"SCIP optimal in \d+\.\d+ s: objective [\d.e+-]+ us(?: \(predicted [^)]*\))?, dual bound [\d.e+-]+ us, "
        r"gap 0\.00%",
        text,
    )
    assert re.search(r"proved by isl for .*: \d+ obligations \(in bounds \d+, race free \d+", text)
    assert "proved:" not in text  # counted in one line; listed on request
    assert "  proved: kernel0: every access of S2 in bounds" in mapping.report(proofs=True).splitlines()
    # a mapping edited after its proof lists nothing of that proof: it says it is not proved
    km = mapping.kernels[0]
    loops = (dataclasses.replace(km.loops[0], seq=2 * km.loops[0].seq),) + km.loops[1:]
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, loops=loops),))
    listed = edited.report(proofs=True)
    assert not edited.proved and "not proved: the proof attached is of other decisions" in listed
    assert "  proved: " not in listed


@pytest.mark.slow  # the fast counterpart: every model of test_codegen.py's NUMERIC, optimal and proved
def test_every_model_maps_to_proven_optimality():
    for path in sorted(MODELS.glob("*.te")):
        program = load(path)
        if path.stem == "transpose_flat":
            program = program.bind_defaults()
        mapping = optimize(program)
        assert all(r.outcome in (Outcome.OPTIMAL, Outcome.NO_DECISIONS) for r in mapping.solver), path
        assert mapping.proofs, path


# ---------------------------------------------------------------------- pins


def test_pins_are_respected():
    program = parse(MATMUL).bind(M=128, N=128, K=8)
    mapping = optimize(
        program, pins={"i": "threadIdx.x", "j": {"threads": 4, "seq": 2, "distribution": "cyclic"}}
    )
    i, j = mapping.kernels[0].loops
    assert i.thread_axis is Axis.X
    assert (j.threads, j.seq, j.distribution) == (4, 2, Distribution.CYCLIC)


def test_pinning_everything_reproduces_the_pinned_mapping():
    program = parse(MATMUL).bind(M=100, N=70, K=8)
    pins = {
        "i": {"thread": "y", "block": "x", "threads": 4, "seq": 2, "distribution": "blocked"},
        "j": {"thread": "x", "block": "y", "threads": 32, "seq": 1, "distribution": "cyclic"},
    }
    i, j = optimize(program, pins=pins).kernels[0].loops
    assert (i.thread_axis, i.block_axis, i.threads, i.seq, i.distribution) == (
        Axis.Y,
        Axis.X,
        4,
        2,
        Distribution.BLOCKED,
    )
    assert (j.thread_axis, j.block_axis, j.threads, j.seq, j.distribution) == (
        Axis.X,
        Axis.Y,
        32,
        1,
        Distribution.CYCLIC,
    )
    assert (i.blocks, j.blocks) == (math.ceil(100 / 8), math.ceil(70 / 32))


def test_contradictory_pins_name_the_conflict():
    program = parse(MATMUL).bind(M=64, N=64, K=8)
    with pytest.raises(
        InfeasibleMappingError, match=r"the pins 'i' \(thread_axis=x\); 'j' \(thread_axis=x\) conflict"
    ):
        optimize(program, pins={"i": "threadIdx.x", "j": "threadIdx.x"})
    # a pin that is fine alone is left out of the conflict
    with pytest.raises(
        InfeasibleMappingError, match=r"'i' \(threads=1024\); 'j' \(threads=64\) conflict"
    ) as err:
        optimize(program, pins={"i": {"threads": 1024}, "j": {"threads": 64}, "kernel0.i": "blocked"})
    assert "kernel0.i" not in str(err.value)


def test_unknown_and_malformed_pins_are_argument_errors():
    program = parse(MATMUL).bind(M=64, N=64, K=8)
    with pytest.raises(
        ArgumentError, match=r"pin 'q' names no par loop mapped to the GPU \(band loops: .*i.*j"
    ):
        optimize(program, pins={"q": "threadIdx.x"})
    with pytest.raises(
        ArgumentError,
        match=r"pin 'k': 'k' is a seq loop .* only its 'tile', 'stage', 'transpose', 'copy' and 'slots' can be pinned",
    ):
        optimize(program, pins={"k": {"threads": 32}})  # k is a seq loop
    with pytest.raises(ArgumentError, match=r"threads must be a power of two >= 1, got 48"):
        optimize(program, pins={"j": {"threads": 48}})
    with pytest.raises(ArgumentError, match=r"not a hardware axis"):
        optimize(program, pins={"j": "threadIdx.w"})
    with pytest.raises(ArgumentError, match=r"unknown GPU target 'v100'.*known names"):
        optimize(program, "v100")


def test_symbolic_sizes_are_mapped_for_every_size_of_the_context():
    context = "M >= 256 and N >= 256 and K >= 256"
    mapping = optimize(parse(MATMUL), context=context)
    assert dict(mapping.cost_sizes) == {"M": 256, "N": 256, "K": 256}
    assert mapping.proofs
    # the optimum over both choices of the x loop (at these sizes the staged reads bind, not
    # C's stores: i on x can be the cheaper)
    for x in ("i", "j"):
        pinned = optimize(parse(MATMUL), context=context, pins={x: "x"})
        assert mapping.costs[0].objective_s <= pinned.costs[0].objective_s + 1e-12


# ------------------------------------------------------------ Farkas certificates


def test_every_farkas_certificate_is_checked_exactly():
    program = parse(MATMUL).bind(M=64, N=64, K=8)
    model = analyze(program)
    kernel = kernels(program)[0]
    problem = KernelProblem.build(kernel, model, H100, Pins(), None)
    report, mapping = problem.solve(Pins())
    assert report.status == "optimal" and mapping is not None
    # five affine accesses, one system per band loop (i, j) each: D_j >= |c_j| delta_j,
    # which needs no second (downward) system
    assert problem.certificates_checked == sum(len(a.systems) for a in problem.accesses) == 10


def test_a_broken_certificate_is_reported_loudly(monkeypatch):
    monkeypatch.setattr(scip_model_module, "exact_certificate", lambda *a, **k: None)
    with pytest.raises(InternalError, match=r"Farkas certificate for the lane stride of .* does not hold"):
        optimize(parse(MATMUL).bind(M=64, N=64, K=8))


# ------------------------------------------- SCIP's optimum against enumeration


def _feasible(extents: tuple[int, ...], loops: tuple[tuple, ...], lanes: int = 0) -> bool:
    """The model's limits, restated independently for the oracle; with ``lanes`` (32 times a
    power of two) threadIdx.x holds the lanes, so no band loop is on x and the block is
    ``lanes`` times the band's threads, and several warps per point are a block each (no
    band loop has threads)."""
    caps = [math.ceil(math.log2(n)) if n > 1 else 0 for n in extents]
    tiny = sum(caps) < 5
    axes = [t for t, *_ in loops]
    blocks = [b for _, b, *_ in loops]
    if len(set(axes)) != len(axes) or len(set(blocks)) != len(blocks) or (Axis.X in axes) == bool(lanes):
        return False
    lts = [lt for _, _, lt, *_ in loops]
    lss = [ls for _, _, _, ls, *_ in loops]
    if lanes > 32 and any(lts):
        return False
    threads_log = sum(lts) + (int(math.log2(lanes)) if lanes else 0)
    # a tiny band: a block of one warp, or with lanes the point's warps
    if tiny and (sum(lts) + (5 if lanes else 0) != 5 or any(lss)):
        return False
    if not tiny and not 5 <= threads_log <= MAX_LOG_THREADS:
        return False
    if sum(lss) > MAX_LOG_SEQ_TOTAL:
        return False
    for (axis, block, lt, ls, *_), cap, n in zip(loops, caps, extents):
        if axis is Axis.Z and lt > MAX_LOG_Z:
            return False
        if not tiny and (lt + ls > cap or (axis is Axis.X and lt < min(5, cap))):
            return False
        if block in (Axis.Y, Axis.Z) and math.ceil(n / 2 ** (lt + ls)) > GRID_YZ:
            return False
    return True


def _alone(choice: tuple, cap: int, n: int, lanes: int, tiny: bool) -> bool:
    """Whether one loop's (axis, block axis, log2 T, log2 S) passes the checks of
    ``_feasible`` that read that loop alone: a necessary condition, to prune the product."""
    axis, block, lt, ls = choice
    if (lanes and axis is Axis.X) or (lanes > 32 and lt) or (axis is Axis.Z and lt > MAX_LOG_Z):
        return False
    if tiny:
        return not ls
    if lt + ls > cap or (axis is Axis.X and lt < min(5, cap)):
        return False
    return not (block in (Axis.Y, Axis.Z) and math.ceil(n / 2 ** (lt + ls)) > GRID_YZ)


def _span_blocks(problem: KernelProblem, mapped: KernelMapping) -> int:
    """The most blocks a block of this mapping's span may launch, however split over the
    loops (what the model's shared-memory capacity reads)."""
    caps = tuple(max(0, math.ceil(math.log2(n))) if n > 1 else 0 for n in problem.extents)
    span_log = round(math.log2(math.prod(m.threads * m.seq for m in mapped.loops)))
    return span_blocks(most_blocks(problem.extents, caps), problem.extents, span_log)


def _stagings(problem: KernelProblem, mapped: KernelMapping):
    """Every staging the model allows for a mapping, restated for the oracle: one scope,
    K = 2^m up to the loop's extent (1 for the whole body), any non-empty set of its
    candidates whose tile rows are a sector wide (8 elements where not transposed) and whose tiles (counted with the model's
    padding allowance) fit the block's shared-memory capacity, and any subset of those with a
    tile that can be transposed stored transposed (rows of at least 128 bytes then), each in
    one slot or, over a tiled loop and where the tiles fit twice, in two (double buffering)."""
    yield None
    extents = dict(problem.scope_extents)
    blocks = _span_blocks(problem, mapped)
    scopes = dict.fromkeys(c.loop for c in problem.candidates)
    for scope in scopes:
        cands = [c for c in problem.candidates if c.loop == scope]
        top = (
            0
            if scope is None
            else min(MAX_LOG_TILE, math.ceil(math.log2(extents[scope])) if extents[scope] > 1 else 0)
        )
        for m in range(top + 1):

            def width(v, m=m, scope=scope):
                return 2**m if v == scope else mapped.loop(v).threads * mapped.loop(v).seq

            for r in range(1, len(cands) + 1):
                for subset in itertools.combinations(cands, r):
                    if any(width(c.dims[-1]) * c.element_bytes < 32 for c in subset):
                        continue
                    # a loop in a tile's origin runs one iteration per block
                    if any(width(v) > 1 for c in subset for v in c.per_block):
                        continue
                    used = sum(
                        c.element_bytes * PADDING * math.prod(width(v) for v in c.loops) for c in subset
                    )
                    # double buffering (a tiled loop only) holds every tile twice
                    slots = [
                        n
                        for n in ((1, 2) if scope is not None else (1,))
                        if n * used <= shared_capacity(H100, mapped.threads_per_block, blocks)
                    ]
                    if not slots:
                        continue
                    turnable = [
                        c.buffer
                        for c in subset
                        if c.transposable and width(c.dims[-2]) * c.element_bytes >= 128
                    ]
                    for k in range(len(turnable) + 1):
                        for turned in itertools.combinations(turnable, k):
                            # the shared rows of a tile stored as the buffer is: 8 elements
                            if any(width(c.dims[-1]) < 8 for c in subset if c.buffer not in turned):
                                continue
                            for n in slots:
                                yield Staging(scope, 2**m, tuple(c.buffer for c in subset), turned, slots=n)


def _enumerate_best(problem: KernelProblem) -> tuple[float, float]:
    """The best objective over every mapping within the model's limits (either order of a
    thread's points), and the best when the register limit is left out (to show that a
    test's limit decides)."""
    band = problem.kernel.band
    # per loop: axes, log2 T and log2 S, which decide feasibility; then each distribution
    # (``space.py``: cyclic, blocked, or grouped by a power of two between 1 and S, which
    # the model searches on the loop on x only)
    choices = list(
        itertools.product(list(Axis), list(Axis), range(MAX_LOG_THREADS + 1), range(MAX_LOG_SEQ + 1))
    )

    def distributions(axis: Axis, ls: int):
        groups = range(1, ls) if axis is Axis.X else ()
        return [(Distribution.CYCLIC, 1), (Distribution.BLOCKED, 1)] + [
            (Distribution.GROUPED, 2**g) for g in groups
        ]

    best = best_any = math.inf
    # the order of a thread's points is a decision only where the body has a loop (the model's
    # space: ``interleavable``); elsewhere the points run one after another
    orders = (False, True) if interleavable(problem.kernel) else (False,)
    # with lanes (a warp per point, or 2 to 32 warps: a block) the band is on y and z,
    # nothing staged or interleaved; several warps only where the spread loops give each
    # work (up to the power of two at or above the warps their iterations fill) and up to
    # the first count that fills the GPU's thread slots (the model's space: ``_most_lane_warps``)
    busy = -(-problem.spread_iterations // 32)
    slots = H100.sm_count * H100.max_threads_per_sm
    warps = [
        w
        for w in (1, 2, 4, 8, 16, 32)
        if w == 1 or (w // 2 < busy and math.prod(problem.extents) * 32 * w // 2 < slots)
    ]
    # and up to the fewest warps whose band points in flight let their re-reads hit in L2
    if AGAIN in problem.reuse:
        fit = next((w for w in (1, 2, 4, 8, 16, 32) if w // 2 < busy and problem.reuse_fits(32 * w)), 1)
        warps = sorted(set(warps) | {w for w in (1, 2, 4, 8, 16, 32) if w <= fit})
    # and up to the fewest warps whose shared arrays leave the SM its thread slots' blocks
    fit = 2 ** problem.shared_fit_warps_log2()
    warps = sorted(set(warps) | {w for w in (1, 2, 4, 8, 16, 32) if w <= fit and w // 2 < busy})
    caps = [math.ceil(math.log2(n)) if n > 1 else 0 for n in problem.extents]
    for lanes in (0, *(32 * w for w in warps)) if problem.spread else (0,):
        # each loop's choices that pass _feasible's checks of one loop alone (only to prune:
        # _feasible checks every combination in full)
        per_loop = [
            [c for c in choices if _alone(c, cap, n, lanes, sum(caps) < 5)]
            for cap, n in zip(caps, problem.extents)
        ]
        feasible = (
            combo for combo in itertools.product(*per_loop) if _feasible(problem.extents, combo, lanes)
        )
        every = (
            (combo, spread)
            for combo in feasible
            for spread in itertools.product(*(distributions(t, ls) for t, _, _, ls in combo))
        )
        for combo, spread in every:
            mapped = KernelMapping(
                problem.kernel,
                tuple(
                    LoopMapping(loop.index, t, b, 2**lt, 2**ls, d, loop.extent, n, group=v)
                    for loop, (t, b, lt, ls), (d, v), n in zip(band, combo, spread, problem.extents)
                ),
            )
            laned = dataclasses.replace(mapped, lanes=lanes, spread=problem.spread)
            # the arrays the lanes share, a copy per point of the block, within a block's
            # shared memory (what they take from the SM's occupancy, the cost charges)
            arrays = problem.shared_bytes * laned.shared_copies + problem.tree_bytes(laned)
            if lanes and problem.shared_bytes and arrays > H100.shared_memory_per_block:
                continue
            variants = (
                [laned]
                if lanes
                else [
                    KernelMapping(mapped.kernel, mapped.loops, staging, interleaved)
                    for staging, interleaved in itertools.product(_stagings(problem, mapped), orders)
                ]
            )
            for variant in variants:
                objective = problem.cost(variant).objective_s * 1e6
                best_any = min(best_any, objective)
                if _within_registers(problem, variant):
                    best = min(best, objective)
    return best, best_any


def _within_registers(problem: KernelProblem, mapped: KernelMapping) -> bool:
    """The model's register limit, restated for the oracle: the estimate (the model's own,
    ``KernelProblem.registers``: what is checked here is the search, not the estimate) at most
    255 per thread, unless the body's arrays alone need more, and 65536 for the block."""
    regs = problem.registers(mapped)
    return regs <= problem.register_limit and mapped.threads_per_block * regs <= REGISTERS_PER_BLOCK


def _assert_scip_equals_enumeration(program) -> float:
    """SCIP's optimum of the program's one kernel is the best objective over every mapping
    (the predicted time plus the ranking term, ``KernelCost.objective_s``). Returns the best
    objective without the register limit."""
    model = analyze(program)
    kernel = kernels(program)[0]
    problem = KernelProblem.build(kernel, model, H100, Pins(), None)
    report, mapping = problem.solve(Pins())
    assert report.status == "optimal"
    best, best_any = _enumerate_best(problem)
    # SCIP's objective carries a tie-break of at most 1e-6 us per decision
    assert report.objective == pytest.approx(best, rel=1e-6, abs=1e-4)
    assert problem.cost(mapping).objective_s * 1e6 == pytest.approx(best, rel=1e-6, abs=1e-4)
    assert _within_registers(problem, mapping)
    return best_any


@st.composite
def small_programs(draw):
    """One or two par loops over small extents, a few affine reads and one write."""
    depth = draw(st.integers(1, 2))
    names = ["i", "j"][:depth]
    extents = [draw(st.sampled_from([3, 8, 40, 64, 100])) for _ in names]
    decls = [f"param {', '.join(f'N{k} = {e}' for k, e in enumerate(extents))}"]
    shape = ", ".join(f"N{k}" for k in range(depth))
    reads = []
    for r in range(draw(st.integers(1, 3))):
        order = draw(st.permutations(names))
        decls.append(f"in R{r}: f32[{', '.join(f'N{names.index(n)}' for n in order)}]")
        reads.append(f"R{r}[{', '.join(order)}]")
    out_order = draw(st.permutations(names))
    decls.append(f"out W: f32[{', '.join(f'N{names.index(n)}' for n in out_order)}]")
    body = f"W[{', '.join(out_order)}] = {' + '.join(reads)}"
    for k, n in reversed(list(enumerate(names))):
        body = f"par N{k} {n} {{ {body} }}"
    return "\n".join(decls + [body]), shape


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_programs())
def test_scip_optimum_equals_enumeration(case):
    text, _ = case
    program = parse(text).bind_defaults()
    _assert_scip_equals_enumeration(program)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_programs())
def test_scip_optimum_equals_enumeration_on_many_programs(case):
    """The case above on ten times as many programs (``pytest -m slow``)."""
    text, _ = case
    program = parse(text).bind_defaults()
    _assert_scip_equals_enumeration(program)


def test_accumulators_go_to_registers_unless_asked_not_to():
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=16)
    promoted = optimize(program, pins=THREAD_PER_OUTPUT)
    as_written = optimize(program, registers=False, pins=THREAD_PER_OUTPUT)
    assert as_written.program == program and promoted.program != program

    def c_bytes(m):
        return sum(a.bytes for a in m.costs[0].accesses if a.access.startswith("C["))

    # as written, C[i, j] is read and written once per k (K = 16) plus the initial store
    assert c_bytes(as_written) > 10 * c_bytes(promoted) > 0
    assert verify(program, promoted).lines() and verify(program, as_written).lines()


# SCIP against enumeration beyond par-only affine programs (issue 9 item 5): quasi-affine
# reads (a folded band's kind among them), and a seq loop whose tiles may be staged in
# shared memory (the enumeration tries every scope, tile and buffer set).
ORACLE_PROGRAMS = {
    # i runs over pairs (i / 4, i % 4), as a folded band does
    "quasi-affine": """
        in R: f32[6, 4, 40]
        in Q: f32[320]
        out W: f32[24, 40]
        par 24 i { par 40 j { W[i, j] = R[i / 4, i % 4, j] + Q[(i * 40 + j) / 3] } }
    """,
    # a body array of 600 elements: 632 registers by the model's estimate, so at most 64
    # threads per block (65536 / 632 = 103), where one block of all 128 would copy each tile once
    "register-limited": """
        in A: f32[16, 16]
        in B: f32[16, 8]
        out C: f32[16, 8]
        par 16 i { par 8 j {
          new t: f32[600]
          seq 600 m { t[m] = A[i, m % 16] }
          seq 16 k { C[i, j] += t[k] * B[k, j] }
        } }
    """,
    # an accumulator per point where the points interleave: staged reads shared by points
    # against registers and the fill (64 x 64 in the slow set below: 15 s of enumeration)
    "accumulator": """
        in A: f32[32, 16]
        in B: f32[16, 32]
        out C: f32[32, 32]
        par 32 i { par 32 j {
          new acc: f32
          acc = 0
          seq 16 k { acc += A[i, k] * B[k, j] }
          C[i, j] = acc
        } }
    """,
    # a row of 8 KiB the lanes share in shared memory: 24 such blocks fill an SM's 228 KiB,
    # fewer than the thread slots of small blocks allow, so the occupancy they leave is a cost
    "shared-occupancy": """
        in X: f32[16384, 2048]
        out Y: f32[16384, 2048]
        par 16384 i {
          new t: f32[2048]
          seq 2048 k { t[k] = X[i, k] * 2 }
          seq 2048 k { Y[i, k] = t[2047 - k] }
        }
    """,
    # a row reduction: a warp per row (lanes) against a thread per row; the enumeration tries
    # both, with every band mapping each allows
    "lanes-row-sum": """
        in X: f32[256, 512]
        out y: f32[256]
        par 256 i {
          new s: f32
          s = 0
          seq 512 j { s += X[i, j] }
          y[i] = s
        }
    """,
    # two spread loops, a max and a scaled copy that reads it (a broadcast), in a 2-d band
    # a row's second pass re-reads what its first read: in L2 with a warp per row (8448 rows
    # of 1 KiB in flight), not with a thread per row (X alone is 32 MiB)
    "lanes-reread": """
        in X: f32[65536, 128]
        out Y: f32[65536, 128]
        par 65536 i {
          new m: f32
          m = X[i, 0]
          seq 128 j { m max= X[i, j] }
          seq 128 j { Y[i, j] = X[i, j] - m }
        }
    """,
    "lanes-max-scale": """
        in X: f32[4, 64, 96]
        out Y: f32[4, 64, 96]
        par 4 b { par 64 i {
          new m: f32
          m = X[b, i, 0]
          seq 96 j { m max= X[b, i, j] }
          seq 96 j { Y[b, i, j] = X[b, i, j] / m }
        } }
    """,
    # gathers (issue 13): a row read through ids[i] is the same for every lane along j
    # (coalesced along j); along i each lane reads any row, which both SCIP's Farkas bound
    # and the enumeration's exact stride charge as (rows - 1) * row stride
    "gather-rows": """
        in E: f32[100, 64]
        in ids: i32[48]
        out Y: f32[48, 64]
        par 48 i { par 64 j { Y[i, j] = E[ids[i], j] * 2 } }
    """,
    # a permutation of the columns: lanes along j read X anywhere in the row, write Y in order
    "gather-columns": """
        in X: f32[64, 96]
        in perm: i32[96]
        out Y: f32[64, 96]
        par 64 i { par 96 j { Y[i, j] = X[i, perm[j]] } }
    """,
    # k in 4 tiles of 64 at most: every tile size and its slots (2: double-buffered, the
    # optimum here, whose tiles' waits overlap the compute)
    "seq-staged": """
        in A: f32[32, 256]
        in B: f32[256, 32]
        out C: f32[32, 32]
        par 32 i { par 32 j { seq 256 k { C[i, j] += A[i, k] * B[k, j] } } }
    """,
    # 2^22 threads at a point each: 15.5 waves of the GPU's thread slots, so the first-load
    # roof (the memory latency per wave) decides, and SCIP's tangents of 1/prod S must be
    # exact where the enumeration's division is
    "first-loads": """
        in R: f32[4194304]
        out W: f32[4194304]
        par 4194304 i { W[i] = R[i] * 2 }
    """,
}


# the same kinds at sizes whose enumeration takes longer (``pytest -m slow``)
SLOW_ORACLE_PROGRAMS = {
    "accumulator-64": ORACLE_PROGRAMS["accumulator"].replace("32", "64"),
    "register-limited-256-threads": """
        in A: f32[16, 16]
        in B: f32[16, 16]
        out C: f32[16, 16]
        par 16 i { par 16 j {
          new t: f32[300]
          seq 300 m { t[m] = A[i, m % 16] }
          seq 16 k { C[i, j] += t[k] * B[k, j] }
        } }
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_ORACLE_PROGRAMS))
def test_scip_optimum_equals_enumeration_at_larger_sizes(name):
    _assert_scip_equals_enumeration(parse(SLOW_ORACLE_PROGRAMS[name], name=name))


@pytest.mark.parametrize("name", sorted(ORACLE_PROGRAMS))
def test_scip_optimum_equals_enumeration_beyond_affine_par_loops(name):
    program = parse(ORACLE_PROGRAMS[name], name=name)
    best_any = _assert_scip_equals_enumeration(program)
    if name == "lanes-row-sum":  # the new decisions are the optimum here, not just enumerated:
        # 256 rows fill 3% of the GPU with a warp each, half with 16 (512 columns)
        assert polymap.optimize(program).kernels[0].lanes == 512
    if name == "lanes-max-scale":  # 256 rows of 96: a warp each already fills the GPU's quarter
        assert polymap.optimize(program).kernels[0].lanes >= 32
    if name == "seq-staged":  # likewise double buffering, among mappings of a thread per point
        # (with register promotion the k loop may run on a block's lanes)
        assert polymap.optimize(program, pins={"i": {"lanes": 1}}).kernels[0].staging.slots == 2
    if name == "shared-occupancy":  # the shared arrays' occupancy is charged, not refused
        km = polymap.optimize(program).kernels[0]
        assert km.shared_locals == ("t",) and km.lanes > 32
    if name == "register-limited":  # the limit decides: without it the optimum is another mapping
        # (a thread per point, t in its registers; with lanes a block's lanes share t instead)
        assert polymap.optimize(program).kernels[0].shared_locals == ("t",)
        problem = KernelProblem.build(kernels(program)[0], analyze(program), H100, Pins(), None, spread=())
        best, best_any = _enumerate_best(problem)
        objective = problem.solve(Pins())[0].objective
        assert objective == pytest.approx(best, rel=1e-6, abs=1e-4) and best_any < objective - 1e-4


def test_the_first_load_roof_is_a_latency_per_wave_of_threads_and_only_for_reads():
    from polymap.mapping.cost_model import latency_time

    slots = H100.sm_count * H100.max_threads_per_sm  # 132 * 2048
    assert latency_time(H100, 4 * slots, 1, True) == pytest.approx(4 * H100.memory_latency_s)
    assert latency_time(H100, 4 * slots, 4, True) == pytest.approx(H100.memory_latency_s)
    assert latency_time(H100, 10, 1, True) == pytest.approx(H100.memory_latency_s)  # at least one wave
    assert latency_time(H100, 4 * slots, 1, False) == 0.0  # stores do not wait
    # blocks of 32 threads: at most 32 of them per SM, half its 2048 slots, so twice the waves
    assert latency_time(H100, 4 * slots, 1, True, 32) == pytest.approx(8 * H100.memory_latency_s)
    assert latency_time(H100, 4 * slots, 1, True, 256) == pytest.approx(4 * H100.memory_latency_s)
    # and SCIP charges the same where a pin forces such blocks
    copy_text = "in R: f32[4194304]\nout W: f32[4194304]\npar 4194304 i { W[i] = R[i] }"
    small = optimize(parse(copy_text), pins={"i": {"threads": 32, "seq": 1}})
    assert small.costs[0].latency_s == pytest.approx(latency_time(H100, 4194304, 1, True, 32))
    assert small.solver[0].objective == pytest.approx(small.costs[0].objective_s * 1e6, rel=1e-6)
    # the report names it, and a program that only writes has none
    copy = optimize(parse("in R: f32[4194304]\nout W: f32[4194304]\npar 4194304 i { W[i] = R[i] }"))
    assert "first loads" in copy.report() and copy.costs[0].latency_s > 0
    assert copy.costs[0].bound_by == "memory" and "us (memory bound)" in copy.report()
    small = optimize(parse("in R: f32[4096]\nout W: f32[4096]\npar 4096 i { W[i] = R[i] }"))
    assert small.costs[0].bound_by == "first loads" and "1.3 us (first loads bound)" in small.report()
    fill = optimize(parse("out W: f32[4194304]\npar 4194304 i { W[i] = 1 }"))
    assert "first loads" not in fill.report() and fill.costs[0].latency_s == 0.0


# ------------------------------------- a split reduction's choice against enumeration


def test_the_split_chosen_is_the_cheapest_option_by_enumeration():
    """Each option of a split (``pipeline.choose_splits``) is the program rewritten; its
    objective is the sum over its kernels of SCIP's optimum, which must equal the best that
    enumerating every mapping of each kernel finds, and the option taken is the cheapest."""
    from polymap.pipeline import Analyses, transform
    from polymap.transform.split import Form, Split, reduction_at
    from polymap.transform.split_rewrite import split_reduction

    program = parse("param N = 16384\nin x: f32[N]\nout s: f32[1]\ns[0] += x[i]")
    mapping = optimize(program, pins={"i_part": {"split": 1}})
    (choice,) = [c for c in mapping.splits if c.loop == "i"]
    # parts of 256 iterations, and of 32 where those leave the GPU under-filled
    assert [what for what, _, _ in choice.options] == [
        "unsplit",
        "64 cyclic parts",
        "64 blocked parts of 256",
        "512 cyclic parts",
        "512 blocked parts of 32",
    ]
    reduction = reduction_at(program, analyze(program), 0, reassociate=True)
    enumerated = []
    for what, objective, _ in choice.options[1:]:
        parts, how = what.split()[:2]
        split = split_reduction(program, reduction, Split(int(parts), Form(how)), extent=16384)
        rewritten = transform(split, registers=True, analyses=Analyses()).bind_defaults()
        model = analyze(rewritten)
        total = 0.0
        for kernel in kernels(rewritten):
            problem = KernelProblem.build(kernel, model, H100, Pins(), None)
            best, _ = _enumerate_best(problem)
            total += best
        assert objective * 1e6 == pytest.approx(total, rel=1e-5), what
        enumerated.append(total)
    assert choice.options[choice.chosen][1] * 1e6 == pytest.approx(min(enumerated), rel=1e-5)
    assert choice.options[0][1] > choice.options[choice.chosen][1]


def test_a_group_is_pinned_and_its_bad_values_are_named():
    """``group`` pins a loop's points into groups of neighbours (``space.py``): 1 is cyclic,
    S blocked, between them grouped; a value that is no power of two, a group beyond S and
    a grouped loop made by hand with a group outside (1, S) are errors that say so."""
    program = parse(MATMUL).bind(M=256, N=256, K=64)
    mapping = optimize(program, pins={"j": {"thread": "x", "threads": 32, "seq": 8, "group": 2}})
    j = mapping.kernels[0].loop("j")
    assert (j.distribution, j.group, j.step) == (Distribution.GROUPED, 2, 2)
    assert "j = blockIdx.x*256 + (s_j/2)*64 + threadIdx.x*2 + s_j%2" in str(mapping)
    assert mapping.to_json()["kernels"][0]["loops"][1]["group"] == 2
    one = optimize(program, pins={"j": {"thread": "x", "threads": 32, "seq": 8, "group": 1}})
    assert one.kernels[0].loop("j").distribution is Distribution.CYCLIC
    whole = optimize(program, pins={"j": {"thread": "x", "threads": 32, "seq": 8, "group": 8}})
    assert whole.kernels[0].loop("j").distribution is Distribution.BLOCKED
    with pytest.raises(ArgumentError, match=r"group must be a power of two >= 1, got 3"):
        optimize(program, pins={"j": {"group": 3}})
    for pin, why in [
        ({"seq": 4, "group": 8}, r"group=8 is more than the loop's seq=4 points"),
        ({"group": 32}, r"group=32 is more than a thread's 16 points at most"),
        ({"seq": 2, "distribution": "grouped"}, r"distribution=grouped needs seq >= 4"),
        ({"distribution": "grouped", "group": 1}, r"distribution=grouped with group=1 is cyclic"),
        ({"distribution": "cyclic", "group": 4}, r"distribution=cyclic has group 1"),
        ({"distribution": "blocked", "seq": 8, "group": 2}, r"distribution=blocked has group = seq = 8"),
    ]:
        with pytest.raises(ArgumentError, match=rf"pin 'j': {why}"):
            optimize(program, pins={"j": pin})
    # what only SCIP can tell: 128 threads of a 256-iteration loop leave room for 2 points,
    # not for groups of 4
    with pytest.raises(InfeasibleMappingError, match=r"threads=128, group=4\) conflict"):
        optimize(program, pins={"j": {"thread": "x", "threads": 128, "group": 4}})
    lm = mapping.kernels[0].loop("j")
    with pytest.raises(
        ArgumentError, match=r"loop 'j': a grouped distribution has a group .* got grouped with group 8"
    ):
        dataclasses.replace(lm, group=8)
    with pytest.raises(ArgumentError, match=r"got blocked with group 2"):
        dataclasses.replace(lm, distribution=Distribution.BLOCKED)


def test_a_grouped_loop_is_the_isl_relation_the_proof_uses():
    """``LoopMapping.iteration`` (the report's formula, the plot's) and the isl expression of
    ``schedule.hardware.band_index`` (what the proof and the code are built from) agree on
    every block, thread and point of a small grouped loop, and run each iteration once."""
    from polymap.ir.nodes import IConst
    from polymap.schedule.hardware import band_index

    lm = LoopMapping("j", Axis.X, Axis.X, 4, 8, Distribution.GROUPED, IConst(64), 64, group=2)
    box = "0 <= g < 2 and 0 <= t < 4 and 0 <= s < 8"
    relation = isl.Map(f"{{ [g, t, s] -> [{band_index(lm, 'g', 't', 's')}] : {box} }}")
    pairs = []
    relation.wrap().foreach_point(
        lambda p: pairs.append(tuple(p.get_coordinate_val(isl.dim_type.set, d).to_python() for d in range(4)))
    )
    assert len(pairs) == 64
    assert all(lm.iteration(g, t, s) == value for g, t, s, value in pairs)
    assert sorted(value for *_, value in pairs) == list(range(64))


# ------------------------------------------------------------ SCIP's start hints


def test_a_staged_gemm_gets_start_hints_of_256_and_512_threads():
    """suggest_start hands SCIP a plain mapping of about 256 threads and, where a seq loop
    can be tiled, a staged one of about 512 (a staged tile's reuse grows with the block).
    The threads fill x first: all of them, where x's limit and loop allow."""
    from pyscipopt import Model

    program = parse(MATMUL).bind(M=1024, N=1024, K=1024)
    problem = KernelProblem.build(kernels(program)[0], analyze(program), H100, Pins(), None)
    scip = Model()
    scip.hideOutput()
    v = scip_model_module.ScipModel(problem, scip, Pins())
    hints = []

    class Recording:  # SCIP's Model, its hints kept (a Cython attribute cannot be patched)
        def __getattr__(self, name):
            return getattr(scip, name)

        def addSol(self, sol, **kw):  # noqa: N802 (SCIP's name)
            hints.append(sol)

    v.scip = Recording()
    assert v.suggest_start()

    def threads(sol):  # log2 of each band loop's threads (i, j)
        return [
            next(k for k in range(v.log_block + 1) if scip.getSolVal(sol, v.ut[j, k]) > 0.5)
            for j in range(v.n)
        ]

    def staged(sol):
        return any(scip.getSolVal(sol, var) > 0.5 for var in v.stage.values())

    assert [(threads(h), staged(h)) for h in hints] == [([0, 8], False), ([0, 9], True)]


def test_block_local_buffers_too_big_for_any_block_are_named_in_the_error():
    """A band point's own buffers live in its thread; 4096 + 64 floats need more registers
    than a block of 32 threads has per thread (65536 / 32 = 2048): with one thread per point
    the error names them and their sizes, not only the target. With lanes (SCIP's choice)
    the point's lanes share them in shared memory (16640 bytes)."""
    program = parse(
        """
in  X: f32[64, 4096]
out Y: f32[64]
par 64 i {
  new T: f32[4096]
  new U: f32[64]
  seq 4096 k { T[k] = X[i, k] * 2 }
  seq 64 k { U[k] = T[k] + T[k + 64] }
  Y[i] = U[0] + U[63]
}
""",
        name="big_locals",
    )
    assert optimize(program).kernels[0].shared_locals == ("T", "U")
    with pytest.raises(
        InfeasibleMappingError, match=r"T \(4096\), U \(64\), 4160 elements in one thread"
    ) as err:
        optimize(program, pins={"i": {"lanes": 1}})
    assert "2048 a thread" in str(err.value) and "the pins 'i' (lanes=1) conflict" in str(err.value)
