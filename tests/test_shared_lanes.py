"""Block-local arrays shared by the lanes (issue 11's fused kernels, issue 12's lanes): an
array of the thread body that a spread loop reads or writes is kept once per band point in
shared memory (``SpreadLoop.shared``), filled and read by every lane, the forks' and joins'
barriers between them. The outputs on the host against values computed here with NumPy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_plan import FFN

import polymap
from polymap import prove_lanes
from polymap.errors import MappingError, VerificationError
from polymap.ir.parse import parse
from polymap.ir.printer import format_program
from polymap.mapping.cost_model import REGISTERS_LANES, REGISTERS_PER_BUFFER, REGISTERS_THREAD
from polymap.mapping.lanes import spread_loops
from polymap.mapping.shared_locals import SharedLocalAccess
from polymap.mapping.solve import KernelProblem
from polymap.mapping.space import Pins, kernels
from polymap.pipeline import Analyses, transform
from polymap.poly.model import analyze
from polymap.targets import H100

# a row's exponentials kept on chip, summed, then divided: three spread loops share `row`
SOFTMAX_ROW = """param R = 48
param C = 300
assume C <= 512
in  X: f32[R, C]
out Y: f32[R, C]
par R i {
  new row: f32[512]
  seq C j {
    row[j] = exp(X[i, j])
  }
  new s: f32
  s = 0
  seq C j {
    s += row[C - 1 - j]
  }
  seq C j {
    Y[i, j] = row[j] / s
  }
}
"""

# the row reversed through the shared copy: lane j reads what lane C - 1 - j wrote, in the
# next run; lane 0 alone reads one element between the two spread loops
REVERSED = """param R = 20
param C = 100
in  X: i32[R, C]
out Y: i32[R, C]
par R i {
  new t: i32[100]
  seq C j {
    t[j] = X[i, j] * 3
  }
  new first: i32
  first = t[0]
  seq C j {
    Y[i, j] = t[C - 1 - j] + first
  }
}
"""

# an array declared inside a sequential loop of the body: a fresh copy per step, reused in
# shared memory step after step; `acc` (declared outside) gathers the steps
PER_STEP = """param R = 6
param T = 5
param C = 70
in  X: i32[R, C]
out Y: i32[R, C]
par R i {
  new acc: i32[70]
  seq C j {
    acc[j] = 0
  }
  seq T k {
    new t: i32[70]
    seq C j {
      t[j] = X[i, j] * (k + 1)
    }
    seq C j {
      acc[j] += t[(j + k) % C]
    }
  }
  seq C j {
    Y[i, j] = acc[j]
  }
}
"""

# every iteration writes the same element: a dependence the loop carries
ONE_ELEMENT = """param R = 8
param C = 64
in  X: f32[R, C]
out Y: f32[R]
par R i {
  new t: f32[2]
  seq C j {
    t[0] = X[i, j]
  }
  Y[i] = t[0]
}
"""


# two iterations write each element of t: only the read loop may be spread
HALVES = """param R = 8
in  X: f32[R, 128]
out Y: f32[R, 64]
par R i {
  new t: f32[64]
  seq 128 j {
    t[j / 2] = X[i, j]
  }
  seq 64 j {
    Y[i, j] = t[j]
  }
}
"""


def _model(text: str, name: str):
    program = transform(parse(text, name=name).bind_defaults(), registers=True, analyses=Analyses())
    model = analyze(program)
    return program, model, kernels(program)[0]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64))
    return e / e.sum(axis=1, keepdims=True)


def test_the_arrays_a_spread_loop_touches_are_shared_and_a_carried_write_is_not():
    _, model, kernel = _model(SOFTMAX_ROW, "softmax_row")
    found = spread_loops(kernel, model)
    assert [(sp.path, sp.shared) for sp in found] == [((1,), ("row",)), ((4,), ("row",)), ((5,), ("row",))]
    _, model, kernel = _model(ONE_ELEMENT, "one_element")
    assert spread_loops(kernel, model) == ()
    _, model, kernel = _model(PER_STEP, "per_step")
    assert {sp.path: sp.shared for sp in spread_loops(kernel, model)} == {
        (1,): ("acc",),
        (2, 1): ("t",),
        (2, 2): ("acc", "t"),
        (3,): ("acc",),
    }


@pytest.mark.parametrize(
    "pins",
    [None, {"i": {"lanes": 32, "threads": 4}}, {"i": {"lanes": 128}}],
    ids=["scip", "warp-per-row-4-per-block", "block-per-row"],
)
def test_a_row_kept_in_shared_memory_gives_the_softmax(pins):
    program = parse(SOFTMAX_ROW, name="softmax_row").bind_defaults()
    kernel = polymap.compile(program, pins=pins)
    km = kernel.mapping.kernels[0]
    assert km.lanes > 1 and km.shared_locals == ("row",)
    copies = km.block_dim()[1] * km.block_dim()[2]
    declared = f"__shared__ float row[{copies}][512];" if copies > 1 else "__shared__ float row[512];"
    assert declared in kernel.source
    x = np.random.default_rng(21).standard_normal((48, 300)).astype(np.float32)
    got = kernel.run_host(X=x)["Y"]
    # a sum of 300 positive terms reordered: relative error within C * u per output, twice
    np.testing.assert_allclose(got, _softmax(x), rtol=2 * 300 * 2.0**-24 + 1e-6, atol=0)


@pytest.mark.parametrize("lanes", [32, 64])
def test_lanes_read_what_other_lanes_and_lane_0_left_in_the_shared_copy(lanes):
    program = parse(REVERSED, name="reversed").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    assert kernel.mapping.kernels[0].shared_locals == ("t",)
    x = np.random.default_rng(22).integers(-1000, 1000, (20, 100)).astype(np.int32)
    want = 3 * x[:, ::-1] + 3 * x[:, :1]
    np.testing.assert_array_equal(kernel.run_host(X=x)["Y"], want)


@pytest.mark.parametrize("lanes", [32, 64])
def test_a_copy_per_step_reused_in_shared_memory_is_exact(lanes):
    program = parse(PER_STEP, name="per_step").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    km = kernel.mapping.kernels[0]
    assert set(km.shared_locals) == {"acc", "t"} and len(km.spread) == 4
    x = np.random.default_rng(23).integers(-100, 100, (6, 70)).astype(np.int32)
    want = np.zeros((6, 70), np.int64)
    for k in range(5):
        want += (k + 1) * np.roll(x, -k, axis=1)
    np.testing.assert_array_equal(kernel.run_host(X=x)["Y"], want)
    assert ".shared" in kernel.ptx()  # NVRTC compiles the shared arrays for sm_90


# ------------------------------------------------------------------ the proof


def test_the_proof_refuses_a_shared_array_taken_for_a_register_of_each_lane(monkeypatch):
    program = parse(REVERSED, name="reversed").bind_defaults()
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32}})
    km = mapping.kernels[0]
    forged = tuple(dataclasses.replace(sp, shared=()) for sp in km.spread)
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=forged),))
    monkeypatch.setattr(prove_lanes, "spread_loops", lambda *a, **k: forged)
    with pytest.raises(VerificationError, match="passes a local's value between lanes that no fork or join"):
        polymap.compile(mapping.program, edited)


def test_the_proof_refuses_two_lanes_writing_one_element_of_a_shared_array(monkeypatch):
    program = parse(HALVES, name="halves").bind_defaults()
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32}})
    km = mapping.kernels[0]
    (read,) = km.spread  # the carried write stays on lane 0
    assert read.path == (2,) and read.shared == ("t",)
    forged = (dataclasses.replace(read, path=(1,), statements=("S0",)), read)
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=forged),))
    monkeypatch.setattr(prove_lanes, "spread_loops", lambda *a, **k: forged)
    with pytest.raises(VerificationError, match="on two lanes inside one run of loop 'j'"):
        polymap.compile(mapping.program, edited)


# ------------------------------------------------------------------ the model


def test_shared_arrays_leave_the_registers_and_enter_the_blocks_shared_memory():
    program, model, kernel = _model(SOFTMAX_ROW, "softmax_row")
    problem = KernelProblem.build(kernel, model, H100, Pins(), None)
    assert (problem.shared_elements, problem.shared_bytes) == (512, 2048)
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32, "threads": 4}})
    km = mapping.kernels[0]
    base = REGISTERS_THREAD + 2 * REGISTERS_PER_BUFFER  # X and Y
    # s alone, and the lanes' combining: row is in shared memory
    assert problem.registers(km) == base + REGISTERS_LANES + 1
    one = polymap.optimize(program, pins={"i": {"lanes": 1}}).kernels[0]
    assert problem.registers(one) == base + 513
    assert km.block_dim() == (32, 4, 1)
    cost = mapping.costs[0]
    assert cost.shared_bytes == 4 * 2048 and cost.registers == base + REGISTERS_LANES + 1  # a row per warp


def test_bank_conflicts_of_a_shared_array_follow_the_lanes_stride():
    def access(stride, element_bytes=4, instances=64):
        return SharedLocalAccess("S0", "t[j]", "t", False, element_bytes, instances, stride)

    # 64 instances: two warp instructions; lanes k apart in 4-byte words meet gcd(k, 32) in a bank
    assert [access(s).wavefronts(32) for s in (0, 1, 2, 3, 8, 32, 33)] == [2, 2, 4, 2, 16, 64, 2]
    assert access(1, element_bytes=8).wavefronts(32) == 4  # 8-byte elements: two banks a lane
    assert access(None).wavefronts(32) == 64 and access(None).requests(32) == 64  # lane 0 alone


def test_an_array_too_big_for_shared_memory_and_for_one_thread_is_refused_with_both_reasons():
    # 52000 bytes: over a block's 48 KiB of shared memory, and 13000 registers a thread
    big = SOFTMAX_ROW.replace("512", "13000").replace("param C = 300", "param C = 12000")
    program = parse(big, name="big_row").bind_defaults()
    with pytest.raises(
        MappingError, match=r"with lanes a point keeps row in shared memory instead, 52000 bytes"
    ):
        polymap.optimize(program)
    # 40000 bytes fit: only lanes can map it
    fits = SOFTMAX_ROW.replace("512", "10000").replace("param C = 300", "param C = 9000")
    km = polymap.optimize(parse(fits, name="fits").bind_defaults()).kernels[0]
    assert km.lanes > 1 and km.shared_locals == ("row",)


ROWS_OF_8K = """in  X: f32[16384, 2048]
out Y: f32[16384, 2048]
par 16384 i {
  new t: f32[2048]
  seq 2048 k { t[k] = X[i, k] * 2 }
  seq 2048 k { Y[i, k] = t[2047 - k] }
}
"""


def test_shared_arrays_that_hold_an_sm_to_fewer_blocks_cost_their_occupancy():
    program = parse(ROWS_OF_8K, name="rows_of_8k")
    # a warp per row, one a block: 8192 + 1024 reserved bytes each, 25 blocks in the H100's
    # 228 KiB (233472 bytes), 800 of its 2048 thread slots (32 blocks of 32 threads: 1024)
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32, "threads": 1}})
    assert mapping.kernels[0].block_dim() == (32, 1, 1)
    assert mapping.costs[0].fill == pytest.approx(800 / 2048)
    # a block of 8 warps per row: 8 blocks by the SM's 2048 thread slots, 25 by shared
    # memory: the threads decide, and the SM is full
    wide = polymap.optimize(program, pins={"i": {"lanes": 256}})
    assert wide.costs[0].fill == pytest.approx(1.0)
    assert polymap.optimize(program).costs[0].time_s <= wide.costs[0].time_s


@pytest.mark.parametrize("capacity", ["512", "4K"])
def test_a_fused_chains_tiles_are_shared_by_the_lanes_and_the_sums_keep_their_order(capacity):
    from polymap.plan.planner import plan
    from polymap.plan.program import planned_program

    program = parse(FFN, name="ffn").bind(M=64, D=32, F=64)  # test_plan's chain, larger
    # the whole plan as a program, its unfused einsums' tiles too (``--fuse`` maps those
    # as written): every segment's tiles are block-local arrays
    kernel = polymap.compile(planned_program(program, plan(program, capacity)).program)
    shared = {name for km in kernel.mapping.kernels for name in km.shared_locals}
    # the tiles a phase fills and the next one reads (which ones depends on the plan SCIP
    # picks among equal-bytes optima)
    assert shared and all(name.endswith(("_tile", "_band")) for name in shared)
    rng = np.random.default_rng(24)
    arrays = {
        n: rng.integers(-4, 5, s).astype(np.float32)
        for n, s in (("X", (64, 32)), ("W1", (32, 64)), ("W2", (64, 32)))
    }
    want = (arrays["X"].astype(np.float64) @ arrays["W1"]) @ arrays["W2"]  # small integers: exact
    np.testing.assert_array_equal(kernel.run_host(**arrays)["Y"], want)


# (from a review) a gathered index into a shared array, and an array of exactly a block's 48
# KiB beside the block's own combine scratch
GATHERED = """param R = 40
in  X: f32[R, 64]
in  P: i32[R]
in  I: i32[R, 64]
out Y: f32[R, 64]
par R i {
  new t: f32[64]
  new n: i32
  n = P[i]
  seq 64 j {
    t[j] = X[i, j]
  }
  seq 64 j {
    Y[i, j] = t[n] + t[I[i, j]]
  }
}
"""


@pytest.mark.parametrize("pins", [None, {"i": {"lanes": 32}}, {"i": {"lanes": 1}}])
def test_a_gathered_index_into_a_shared_array(pins):
    program = parse(GATHERED, name="gathered").bind_defaults()
    kernel = polymap.compile(program, pins=pins)
    rng = np.random.default_rng(25)
    x = rng.integers(-50, 50, (40, 64)).astype(np.float32)
    p, idx = rng.integers(0, 64, 40).astype(np.int32), rng.integers(0, 64, (40, 64)).astype(np.int32)
    want = x[np.arange(40), p][:, None] + np.take_along_axis(x, idx, axis=1)
    np.testing.assert_array_equal(kernel.run_host(X=x, P=p, I=idx)["Y"], want)


def test_a_blocks_shared_arrays_and_its_combine_stay_within_48_kib():
    text = """param R = 40
param C = 12288
assume C <= 12288
in  X: f32[R, C]
out Y: f32[R, C]
par R i {
  new t: f32[12288]
  seq C j { t[j] = X[i, j] * 2 }
  new s: f32
  s = 0
  seq C j { s += t[j] }
  seq C j { Y[i, j] = t[C - 1 - j] + s }
}
"""
    program = parse(text, name="edge")
    mapping = polymap.optimize(program)
    assert mapping.costs[0].shared_bytes <= 49152
    # a block of several warps adds their partials of s: no room left for them
    with pytest.raises(MappingError):
        polymap.optimize(program, pins={"i": {"lanes": 64}})
    # ptxas builds it (it refused 49284 bytes of static shared data) and agrees on the bytes
    (code,) = polymap.compile(program).machine_code().kernels
    assert code.model_shared == mapping.costs[0].shared_bytes


# a band tile's points as one loop (a fused phase, ``plan/program.py``): p // 32 moves
# between warps only, p % 32 along them
FLATTENED = """
in Q: f32[64, 128]
in K: f32[32, 128]
out S: f32[64, 32]
par 2 b {
  new T: f32[32, 32]
  par 1024 p {
    T[p // 32, p % 32] = 0
    seq 128 d {
      T[p // 32, p % 32] += Q[b * 32 + p // 32, d] * K[p % 32, d]
    }
  }
  par 1024 q {
    S[b * 32 + q // 32, q % 32] = T[q // 32, q % 32]
  }
}
"""


def test_the_lane_stride_of_a_quasi_affine_index_is_taken_within_a_warp():
    import re

    mapping = polymap.optimize(parse(FLATTENED, name="flat"), pins={"b": {"lanes": 1024}})
    # the report's access table: "read Q[b * 32 + p // 32, d] (L2)  S1  0  1 ...", the
    # column after the statement is the lane stride
    row = re.compile(r"^\s+(?:read|write) (\w+)\[.*\](?: \(L2\))?\s+S\d+\s+(\d+)\s")
    strides = {m[1]: int(m[2]) for line in mapping.report().splitlines() if (m := row.match(line))}
    # lanes 32w .. 32w + 31 read one row of Q (one sector), 32 rows of K 128 floats apart,
    # and write 32 neighbouring floats of S; the steps from one warp to the next (128
    # floats for Q, 3968 back for K) are no warp's request
    assert strides == {"Q": 0, "K": 128, "S": 1}
    # the band tile's element a lane sums into is a register across the loop over d
    # (``transform/registers.py``: block-local arrays too), stored into T once
    text = format_program(mapping.program)
    assert "T_acc += Q[b * 32 + p // 32, d] * K[p % 32, d]" in text
    assert "T[p // 32, p % 32] = T_acc" in text
    arrays = {
        "Q": np.arange(64 * 128, dtype=np.float32).reshape(64, 128) % 7,
        "K": np.arange(32 * 128, dtype=np.float32).reshape(32, 128) % 5,
    }
    kernel = polymap.compile(mapping.program, mapping)
    np.testing.assert_array_equal(kernel.run_host(**arrays)["S"], arrays["Q"] @ arrays["K"].T)
