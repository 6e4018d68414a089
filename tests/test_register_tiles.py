"""Register tiles: a thread's points interleaved (outer-product order) as a SCIP decision, the
cost it changes (staged reads shared by points, the fill), the code (per-point locals, a copy
of the code for full blocks without the points' guards) and its machine code, each checked
against the reference or counted by hand."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_staging import MATMUL

from polymap import compile, load, optimize, parse, reference, verify
from polymap.cli import main
from polymap.codegen.cuda import EDGE_BLOCK_NOTE
from polymap.errors import ArgumentError, InfeasibleMappingError
from polymap.mapping.space import KernelMapping
from polymap.runtime import cuobjdump
from polymap.runtime.arguments import random_inputs
from polymap.runtime.launches import launches
from polymap.runtime.nvrtc import nvrtc_available

MODELS = Path(__file__).resolve().parents[1] / "models"


# 4 x 4 points per thread, interleaved, over 8 x 32 threads; k in staged tiles of 16, stored
# as the buffers are (a thread reads each value with a scalar load; tests/test_layout.py
# has the transposed tiles and vector loads)
TILE_4X4 = {
    "i": {"thread": "y", "block": "y", "threads": 8, "seq": 4, "distribution": "blocked", "interleave": True},
    "j": {"thread": "x", "block": "x", "threads": 32, "seq": 4, "distribution": "cyclic"},
    "k": {"tile": 16, "stage": ["A", "B"], "transpose": []},
}


def _check_on_host(kernel, sizes, seed=5):
    program = kernel.mapping.program
    arrays = random_inputs(program, sizes, seed=seed)
    got = kernel.run_host(**arrays)
    want = reference(program, **arrays)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4, err_msg=name)


def test_scip_interleaves_a_matmuls_points_where_reads_are_shared():
    """matmul_1024: the staged reads bind (a shared-memory roof); interleaving lets each read of
    A[i, k] serve the thread's S_j points and each read of B[k, j] its S_i points, so SCIP
    interleaves and takes several points of both loops."""
    mapping = optimize(load(MODELS / "matmul_1024.te"))
    km = mapping.kernels[0]
    assert km.interleaved and km.staging is not None
    assert km.loop("i").seq > 1 and km.loop("j").seq > 1
    assert "points interleaved: each step of the body runs all" in str(mapping)
    assert mapping.to_json()["kernels"][0]["interleaved"] is True
    # the same program with the points run one after another costs more, by SCIP and by the model
    apart = optimize(load(MODELS / "matmul_1024.te"), pins={"i": {"interleave": False}})
    assert not apart.kernels[0].interleaved
    assert apart.costs[0].time_s > 2 * mapping.costs[0].time_s
    assert apart.solver[0].objective > mapping.solver[0].objective


def test_interleaved_staged_reads_are_charged_once_per_value():
    """Counted by hand at 256 x 256 x 32, 4 x 4 points: each of the 2^21 / 32 warp reads of A
    serves S_j = 4 points and each of B's S_i = 4 (16384 wavefronts each); the copies store
    16 blocks x (32 x 32 + 32 x 128) elements, 32 per warp store (512 + 2048)."""
    program = parse(MATMUL, name="mm").bind(M=256, N=256, K=32)
    mapping = optimize(program, pins=TILE_4X4)
    cost, target = mapping.costs[0], mapping.target
    assert mapping.kernels[0].interleaved
    wavefronts = 2 * (256 * 256 * 32 // 32 // 4) + 16 * (32 * 32 + 32 * 128) // 32
    assert cost.shared_s == pytest.approx(wavefronts / (target.sm_count * target.clock_hz))
    rows = {a.access: a for a in cost.accesses}
    assert rows["A[i, k]"].requests == rows["B[k, j]"].requests == 256 * 256 * 32 // 32 // 4
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6, rel=1e-5)
    apart = optimize(program, pins={**TILE_4X4, "i": {**TILE_4X4["i"], "interleave": False}})
    wavefronts_apart = 2 * (256 * 256 * 32 // 32) + 16 * (32 * 32 + 32 * 128) // 32
    assert apart.costs[0].shared_s == pytest.approx(wavefronts_apart / (target.sm_count * target.clock_hz))


def test_the_issue_roof_counts_the_warp_instructions_by_hand():
    """The same 4 x 4 tile: 2 * 256 * 256 * 32 flops are 65536 warp FMAs; C is written once
    per element (2048 warp requests; an out buffer nothing wrote, so its register starts at
    0 and C is never read); A and B are read from their tiles
    (16384 shared loads each, as above); the copies load 81920 elements in float4s (640 warp
    loads) and store them (2560 warp stores, charged one per element); the k loop's own
    instructions, 11 per warp step, 4096 steps of 16 points. One instruction per clock and
    scheduler, 4 schedulers per SM."""
    program = parse(MATMUL, name="mm").bind(M=256, N=256, K=32)
    mapping = optimize(program, pins=TILE_4X4)
    cost, target = mapping.costs[0], mapping.target
    instructions = 65536 + 2048 + 2 * 16384 + 81920 // 32 // 4 + 81920 // 32 + 11 * 4096
    assert cost.issue_s == pytest.approx(instructions / (target.sm_count * 4 * target.clock_hz))
    assert f"issue {cost.issue_s * 1e6:.4g} us" in str(mapping)
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6, rel=1e-5)


def test_interleaved_points_count_as_work_in_flight():
    """The fill: 64 points per thread leave 1/64 of the threads, which run one after another
    fill 1/64 as much of the GPU's thread slots; interleaved, each point is independent work
    in flight, and what is left is the blocks: 128 blocks of 64 x 128 points for 132 SMs."""
    program = parse(MATMUL, name="mm").bind(M=1024, N=1024, K=64)
    pins = {
        "i": {"thread": "y", "threads": 4, "seq": 16, "interleave": True},
        "j": {"thread": "x", "threads": 32, "seq": 4},
    }
    together = optimize(program, pins=pins).costs[0]
    apart = optimize(program, pins={**pins, "i": {**pins["i"], "interleave": False}}).costs[0]
    threads = 1024 * 1024 // 64
    capacity = 132 * 2048
    assert apart.fill == pytest.approx(threads / capacity)
    assert together.fill == pytest.approx(128 / 132)


def test_the_order_is_proved_and_compiles_to_outer_product_code():
    program = parse(MATMUL, name="mm")
    mapping = optimize(program, pins=TILE_4X4)
    # the order proved is the interleaved one: the accumulation over k stays in its thread
    assert mapping.kernels[0].interleaved and verify(mapping.program, mapping).lines() == mapping.proofs
    assert any("flow dependence S1 -> S1 on C_acc kept in one thread" in p for p in mapping.proofs)
    kernel = compile(mapping.program, mapping)
    source = kernel.source
    assert re.search(r"\n *float C_acc\[16\];  // one per point of the thread", source)
    full, edge = source.split("// a full block: every point in range", 1)[1].split(EDGE_BLOCK_NOTE, 1)
    body = full[re.search(r"for \(int k = 16 \* kt;", full).start() :]
    body = body[: body.index("C_acc[(4 * s_i + s_j)] +=")]
    # a full block: the points' loops inside the k loop, of constant trip counts, for the
    # compiler to unroll, and no guard among them
    assert re.search(
        r"POLYMAP_UNROLL\n\s*for \(int s_i = 0; s_i <= 3; \+\+s_i\) \{\n\s*POLYMAP_UNROLL\n"
        r"\s*for \(int s_j = 0; s_j <= 3; \+\+s_j\) \{",
        body,
    )
    assert " if (" not in body
    # the other blocks keep each point's guard: isl's bounds of the points, evaluated once
    # into a mask of the thread's live points, whose bit the same loops of constant trip
    # counts test inside the k loop
    mask = re.search(
        r"unsigned long long (\w+) = 0;.*\n\s*for \(int s_i = 0; s_i <= 3; \+\+s_i\) \{\n\s*if \(s_i <= [^\n]*\) \{\n"
        r"\s*for \(int s_j = 0; s_j <= 3; \+\+s_j\) \{\n\s*if \(s_j <= [^\n]*\) \{\n"
        r"\s*\1 \|= 1ULL << \(4 \* s_i \+ s_j\);",
        edge,
    )
    assert mask
    compute = edge[re.search(r"for \(int k = 16 \* kt;", edge).start() :]
    assert re.search(
        rf"for \(int s_j = 0; s_j <= 3; \+\+s_j\) \{{\n\s*if \(\({mask[1]} >> \(4 \* s_i \+ s_j\)\) & 1ULL\) \{{"
        r"\s*// S\d: C_acc \+= ",
        compute,
    )


@pytest.mark.parametrize(
    "sizes",
    [
        {"M": 64, "N": 256, "K": 32},  # every block full
        {"M": 70, "N": 130, "K": 19},  # edge blocks in both loops, a partial k tile
        {"M": 3, "N": 5, "K": 1},  # no block full
    ],
)
def test_interleaved_kernels_match_the_reference_on_the_host(sizes):
    kernel = _tile_kernel()
    _check_on_host(kernel, sizes)


def _tile_kernel():
    global _KERNEL
    if _KERNEL is None:
        program = parse(MATMUL, name="mm")
        _KERNEL = compile(program, optimize(program, pins=TILE_4X4))
    return _KERNEL


_KERNEL = None


def test_every_local_is_held_per_point_where_points_interleave():
    """A temporary declared inside the k loop is live across the points of one step: one per
    point (a single copy would hand each point the last point's value)."""
    program = parse(
        """
        in A: f32[40, 12]
        in B: f32[12, 72]
        out C: f32[40, 72]
        par 40 i { par 72 j {
          new acc: f32
          acc = 0
          seq 12 k { new t: f32
                     t = A[i, k] * 2
                     acc += t * B[k, j] }
          C[i, j] = acc
        } }
        """,
        name="tmp",
    )
    pins = {"i": {"threads": 4, "seq": 4, "interleave": True}, "j": {"threads": 32, "seq": 2}}
    mapping = optimize(program, pins=pins)
    kernel = compile(mapping.program, mapping)
    assert re.search(r"\n *float t\[8\];  // one per point of the thread", kernel.source)
    arrays = random_inputs(program, {}, seed=2)
    got = kernel.run_host(**arrays)
    np.testing.assert_allclose(got["C"], reference(program, **arrays)["C"], rtol=1e-5, atol=1e-5)


def test_the_interleave_pin_is_checked_and_reported():
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=16)
    with pytest.raises(ArgumentError, match="interleave must be true or false"):
        optimize(program, pins={"i": {"interleave": "sometimes"}})
    # without a loop in the body the order is no decision: both are the same unrolled code
    copy = parse("in X: f32[64, 64]\nout Y: f32[64, 64]\npar 64 i { par 64 j { Y[i, j] = X[i, j] } }")
    with pytest.raises(ArgumentError, match="kernel0's body has no loop"):
        optimize(copy, pins={"i": {"seq": 2, "interleave": True}})
    assert not optimize(copy, pins={"i": {"seq": 4}}).kernels[0].interleaved
    # interleaving multiplies the body's 300-element array by the points: beyond 255 registers
    heavy = parse(
        """
        in A: f32[64, 16]
        out C: f32[64, 64]
        par 64 i { par 64 j {
          new t: f32[200]
          seq 200 m { t[m] = A[i, m % 16] }
          C[i, j] = t[j % 200]
        } }
        """,
        name="heavy",
    )
    with pytest.raises(InfeasibleMappingError, match="'i' \\(seq=2, interleave=True\\)"):
        optimize(heavy, pins={"i": {"seq": 2, "interleave": True}})
    assert not optimize(heavy).kernels[0].interleaved


def test_the_interleave_pin_on_the_command_line(tmp_path, capsys):
    source = tmp_path / "mm.te"
    source.write_text(MATMUL)
    args = ["map", str(source), "--size", "M=64", "--size", "N=64", "--size", "K=16", "-q", "--json"]
    assert main([*args, "--pin", "i.interleave=no"]) == 0
    assert json.loads(capsys.readouterr().out)["kernels"][0]["interleaved"] is False
    assert main([*args, "--pin", "i.interleave=yes", "--pin", "i.seq=2"]) == 0
    assert json.loads(capsys.readouterr().out)["kernels"][0]["interleaved"] is True


def test_a_hand_made_interleaved_mapping_is_proved_before_code_is_made():
    """``compile(program, mapping)`` with the order flipped by hand: proved again, and the
    code runs the points interleaved."""
    program = parse(MATMUL, name="mm")
    mapping = optimize(program, pins={**TILE_4X4, "i": {**TILE_4X4["i"], "interleave": False}})
    km = mapping.kernels[0]
    flipped = dataclasses.replace(mapping, kernels=(KernelMapping(km.kernel, km.loops, km.staging, True),))
    kernel = compile(mapping.program, flipped)
    assert kernel.mapping.kernels[0].interleaved
    _check_on_host(kernel, {"M": 33, "N": 129, "K": 17})


needs_tools = pytest.mark.skipif(
    not (nvrtc_available() and cuobjdump.cuobjdump_available()),
    reason="NVRTC or cuobjdump missing (pip install -e '.[test]' installs both)",
)


@needs_tools
def test_a_full_block_reads_each_value_once_per_step_in_the_machine_code():
    """sm_90 machine code of the 4 x 4 tile at symbolic sizes: the hot loop (a full block's k
    loop) does 16 FMAs on 4 + 4 shared loads per k (ptxas may unroll k). Without the full
    blocks' copy each point's guard keeps its loads apart: about one shared load per FMA."""
    report = _tile_kernel().machine_code()
    mix = report.kernels[0].hot
    assert mix is not None and mix.fma % 16 == 0 and mix.fma == 2 * mix.shared_loads
    assert report.kernels[0].resources.stack == 0


def test_scips_objective_is_the_cost_of_its_decisions_with_the_fill_of_interleaved_points():
    """A case a review found: with the fill's points-apart bound as an indicator on
    ``interleaved = 0``, SCIP reported 1.784 us "optimal, gap 0" for decisions the model costs
    1.644 us. As a linear constraint (a big-M of 64 points) the two agree."""
    program = load(MODELS / "batched_matmul.te").bind(NB=4, M=100, K=64, N=64)
    mapping = optimize(program, pins={"i": {"seq": 8}})
    assert mapping.solver[0].status == "optimal"
    assert mapping.solver[0].objective == pytest.approx(mapping.costs[0].objective_s * 1e6, rel=1e-5)


# every step of k writes each point's own element: a point outside the band that ran would
# write into a neighbouring row's (or past the buffer)
PER_POINT_WRITES = """
param M
param N
param K
in  A: f32[M, K]
in  B: f32[N]
out C: f32[M, N, K]
par M i {
  par N j {
    seq K k {
      C[i, j, k] = A[i, k] * B[j]
    }
  }
}
"""


@pytest.mark.parametrize("sizes", [{"M": 13, "N": 6, "K": 3}, {"M": 3, "N": 1, "K": 2}])
def test_an_edge_blocks_live_points_mask_keeps_every_guard(sizes):
    """An edge block's points inside the k loop run where a mask of the thread's live points
    says (``AstPrinter._masked_nest``): it must hold every guard of the nest, or a point past
    the band writes a neighbour's element of C."""
    program = parse(PER_POINT_WRITES, name="per_point")
    pins = {
        "i": {"seq": 4, "distribution": "blocked", "interleave": True},
        "j": {"seq": 4, "distribution": "blocked"},
    }
    kernel = compile(program, optimize(program, pins=pins))
    edge = kernel.source.split(EDGE_BLOCK_NOTE, 1)[1]
    compute = edge[re.search(r"for \(int k = ", edge).start() :]
    assert re.search(r"if \(\(live >> \(4 \* s_i \+ s_j\)\) & 1ULL\) \{\s*// S\d: C\[", compute)
    _check_on_host(kernel, sizes)


@pytest.mark.parametrize(
    ("sizes", "full", "edge"),
    [
        ({"M": 64, "N": 128, "K": 16}, True, False),  # every block full: the edge function is not launched
        ({"M": 40, "N": 128, "K": 5}, True, True),  # a full block and one at an edge of i
        ({"M": 5, "N": 7, "K": 3}, False, True),  # no block full: the full blocks' function is not launched
    ],
)
def test_full_blocks_and_blocks_at_an_edge_run_in_two_functions_launched_where_they_occur(sizes, full, edge):
    """A split kernel's blocks at an edge run in a function of their own, launched after the
    full blocks' function on the same grid, each skipping the other's blocks. Each is
    launched only where its kind of block occurs: a block is full where its 32 x 128 tile
    (8 x 4 rows of i, 32 x 4 columns of j) lies inside M x N. Both the launches computed in
    Python (CuPy's) and the C launcher's (the host run) give the reference's result."""
    # costed at 2048 x 2048 x 64: 1024 blocks, more than one wave (a grid of one wave with
    # blocks at an edge at the cost sizes keeps both codes in one function)
    program = parse(
        MATMUL.replace("param M", "param M = 2048").replace("param N", "param N = 2048"), name="mm"
    )
    kernel = compile(program, optimize(program, pins=TILE_4X4))
    (launch,) = kernel.cuda.launches
    assert launch.edge is not None and launch.edge.function == f"{launch.function}_edge"
    expected = (launch.function,) * full + (launch.edge.function,) * edge
    assert tuple(at.function for at in launches(kernel.cuda, sizes)) == expected
    assert (sizes["M"] >= 32 and sizes["N"] >= 128) == full
    assert (sizes["M"] % 32 != 0 or sizes["N"] % 128 != 0) == edge
    _check_on_host(kernel, sizes)


HOST_LOOP_SHIFT = """
param T = 3
param N = 1048577
assume N >= T
in  X: f32[N]
inout A: f32[N]
seq T t {
  par N - t i {
    A[i] = A[i] * 0.5 + X[i + t]
  }
}
"""


@pytest.mark.parametrize("bound", [False, True])
def test_a_split_kernel_in_a_host_loop_launches_each_function_where_that_iteration_has_its_blocks(bound):
    """Inside a host loop the grid depends on the iteration (``N - t`` elements in blocks of
    128): at T = 3, N = 2^20 + 1 the iterations t = 0 and t = 2 have full blocks and one at
    an edge, t = 1 only full blocks. A block past one iteration's grid is not at an edge of
    it (the frame bounds blocks by the largest grid over all iterations)."""
    program = parse(HOST_LOOP_SHIFT, name="shift")
    n = 2**20 + 1
    if bound:
        program = program.bind(T=3, N=n)
    pins = {"i": {"threads": 32, "seq": 4}}
    kernel = compile(program, optimize(program, pins=pins))
    (launch,) = kernel.cuda.launches
    assert launch.edge is not None
    full, edge = launch.function, launch.edge.function
    sizes = {} if bound else {"T": 3, "N": n}
    assert [(at.host["t"], at.function) for at in launches(kernel.cuda, sizes)] == [
        (0, full),
        (0, edge),
        (1, full),
        (2, full),
        (2, edge),
    ]
    rng = np.random.default_rng(3)
    x, a = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    got = kernel.run_host(X=x, A=a.copy(), **sizes)["A"]
    want = a.copy()
    for t in range(3):  # the program, by hand: each pass reads X shifted by t
        want[: n - t] = want[: n - t] * np.float32(0.5) + x[t:]
    np.testing.assert_allclose(got, want, rtol=1e-6)
