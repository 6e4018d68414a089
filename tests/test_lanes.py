"""Reductions across the lanes of a warp (issue 12): which loops may be spread
(``mapping/lanes.py``), SCIP's choice, the proof's lane obligations, and the emitted code
on the host against expected values computed here in float64 (with the error bound of a
reordered sum) or exactly (integers, max and min)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import polymap
from polymap import prove_lanes
from polymap.errors import VerificationError
from polymap.ir.nodes import AssignOp
from polymap.ir.parse import load, parse
from polymap.mapping.lanes import spread_loops
from polymap.mapping.space import kernels
from polymap.pipeline import Analyses, transform
from polymap.poly.model import analyze

U32 = 2.0**-24  # the unit roundoff of f32

ROW_SUM = """param M = 70
param N = 1000
in  X: f32[M, N]
out y: f32[M]
par M i {
  seq N j {
    y[i] += X[i, j]
  }
}
"""

PREFIX_SUM = """param M = 70
param N = 1000
in  X: f32[M, N]
out Y: f32[M, N]
par M i {
  new s: f32
  s = 0
  seq N j {
    s += X[i, j]
    Y[i, j] = s
  }
}
"""

CARRIED = """param M = 70
param N = 1000
in  X: f32[M, N]
inout Y: f32[M, N]
par M i {
  seq N - 1 j {
    Y[i, j + 1] = Y[i, j] + X[i, j]
  }
}
"""

INT_MAX_AND_SUM = """param M = 40
param N = 77
in  X: i32[M, N]
out total: i32[M]
out top: i32[M]
par M i {
  new s: i32
  new m: i32
  s = 0
  m = X[i, 0]
  seq N j {
    s += X[i, j] * 3
    m max= X[i, j]
  }
  total[i] = s
  top[i] = m
}
"""

BATCHED_ROW_SUM = """param B = 3
param M = 5
param N = 45
in  X: f64[B, M, N]
out y: f64[B, M]
par B b {
  par M i {
    seq N j {
      y[b, i] += X[b, i, j] * X[b, i, j]
    }
  }
}
"""


def _spread(text: str, *, reassociate: bool = True):
    program = transform(parse(text).bind_defaults(), registers=True, analyses=Analyses())
    model = analyze(program)
    (kernel,) = kernels(program)
    return spread_loops(kernel, model, reassociate=reassociate)


def _sum_bound(terms: np.ndarray) -> np.ndarray:
    """Twice the error bound of an f32 sum of n terms in any order, ``(n - 1) u sum |t|``
    per row: the reference's order and the lanes' order each lie within it of the exact sum."""
    n = terms.shape[-1]
    return 2 * (n - 1) * U32 * np.abs(terms).sum(axis=-1) + 1e-30


# ------------------------------------------------------------------ which loops


def test_a_row_sum_and_gemv_spread_their_reduction_and_say_the_order_changes():
    (loop,) = _spread(ROW_SUM)
    assert loop.index == "j" and loop.accumulators == (("y_acc", AssignOp.ADD),) and loop.reassociates
    program = transform(load("models/gemv.te"), registers=True, analyses=Analyses())
    (gemv,) = spread_loops(kernels(program)[0], analyze(program))
    assert gemv.accumulators == (("y_acc", AssignOp.ADD),)


def test_softmax_spreads_its_three_row_loops_with_exact_max_and_broadcast_locals():
    program = transform(load("models/softmax_rows.te"), registers=True, analyses=Analyses())
    loops = spread_loops(kernels(program)[0], analyze(program))
    assert [(sp.accumulators, sp.broadcasts, sp.reassociates) for sp in loops] == [
        ((("mx", AssignOp.MAX),), (), False),
        ((("sum", AssignOp.ADD),), ("mx",), True),
        ((), ("sum",), False),
    ]


def test_a_prefix_sum_is_never_spread():
    assert _spread(PREFIX_SUM) == ()  # the running sum is read by another statement
    assert _spread(CARRIED) == ()  # a dependence between iterations on a global buffer


def test_without_reassociation_only_exact_reductions_are_spread():
    assert _spread(ROW_SUM, reassociate=False) == ()
    (loop,) = _spread(INT_MAX_AND_SUM, reassociate=False)
    assert dict(loop.accumulators) == {"s": AssignOp.ADD, "m": AssignOp.MAX} and not loop.reassociates


def test_argmax_keeps_its_row_in_one_thread():
    program = transform(load("models/argmax_rows.te"), registers=True, analyses=Analyses())
    assert spread_loops(kernels(program)[0], analyze(program)) == ()


# ------------------------------------------------------- SCIP's choice and the code


def test_scip_gives_gemv_lanes_per_row_and_predicts_a_tenth_of_the_time():
    program = load("models/gemv.te")
    with_lanes = polymap.optimize(program)
    warp = polymap.optimize(program, pins={"i": {"lanes": 32}})
    without = polymap.optimize(program, reassociate=False)
    # a warp per row fills 97% of the GPU, a block of 2 warps per row all of it (and so do
    # more warps, memory bound alike: the fewest are taken)
    assert with_lanes.kernels[0].lanes == 64 and without.kernels[0].lanes == 1
    assert with_lanes.predicted_time_s < warp.predicted_time_s
    assert with_lanes.predicted_time_s * 10 < without.predicted_time_s
    assert "2 warps per point, a block each" in with_lanes.report()
    assert "a warp per point" in warp.report() and "per point" not in without.report()


def test_a_row_sum_on_the_lanes_matches_the_reference_within_the_reordered_sums_bound():
    program = parse(ROW_SUM, name="row_sum").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}, "j": {"split": 1}})  # the lanes alone
    assert kernel.mapping.kernels[0].lanes == 32
    assert "reorders the float reduction y_acc +=" in kernel.source
    x = np.random.default_rng(0).standard_normal((70, 1000)).astype(np.float32)
    got = kernel.run_host(X=x)["y"]
    exact = x.astype(np.float64).sum(axis=1)
    assert np.all(np.abs(got - exact) <= _sum_bound(x.astype(np.float64)))
    assert np.all(np.abs(polymap.reference(program, X=x)["y"] - exact) <= _sum_bound(x.astype(np.float64)))
    assert ".entry" in kernel.ptx() and "shfl.sync.bfly" in kernel.ptx()


def test_integer_sums_and_maxima_on_the_lanes_are_exact():
    program = parse(INT_MAX_AND_SUM, name="int_reduce").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    assert kernel.mapping.kernels[0].lanes == 32
    x = np.random.default_rng(1).integers(-1000, 1000, (40, 77)).astype(np.int32)
    got = kernel.run_host(X=x)
    np.testing.assert_array_equal(got["total"], (x.astype(np.int64) * 3).sum(axis=1))
    np.testing.assert_array_equal(got["top"], x.max(axis=1))


def test_softmax_on_the_lanes_with_rows_shorter_than_a_warp():
    program = load("models/softmax_rows.te").bind(M=37, N=19)
    kernel = polymap.compile(program)
    assert kernel.mapping.kernels[0].lanes == 32  # 13 lanes have no column: they only combine
    x = np.random.default_rng(2).standard_normal((37, 19)).astype(np.float32) * 4
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(kernel.run_host(X=x)["Y"], want, rtol=1e-5, atol=1e-7)


def test_a_band_of_two_loops_on_y_and_z_with_the_lanes_on_x():
    program = parse(BATCHED_ROW_SUM, name="batched").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    km = kernel.mapping.kernels[0]
    assert km.lanes == 32 and {lm.thread_axis.value for lm in km.loops} == {"y", "z"}
    x = np.random.default_rng(3).standard_normal((3, 5, 45))
    got = kernel.run_host(X=x)["y"]
    np.testing.assert_allclose(got, (x * x).sum(axis=2), rtol=1e-13)


def test_one_symbolic_kernel_with_lanes_runs_at_any_size():
    program = parse(ROW_SUM.replace("param M = 70\nparam N = 1000\n", "param M\nparam N\n"), name="row_sum")
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    assert "every size" in kernel.mapping.report()
    for m, n in ((1, 1), (3, 31), (5, 33), (9, 200)):
        x = np.random.default_rng(m * n).standard_normal((m, n)).astype(np.float32)
        got = kernel.run_host(X=x)["y"]
        assert np.all(np.abs(got - x.astype(np.float64).sum(axis=1)) <= _sum_bound(x.astype(np.float64)))


def test_pinning_the_lanes_off_keeps_the_reduction_in_a_thread():
    mapping = polymap.optimize(load("models/gemv.te"), pins={"i": {"lanes": 1}})
    assert mapping.kernels[0].lanes == 1


def test_lanes_of_other_than_a_warp_are_refused():
    with pytest.raises(polymap.ArgumentError, match="lanes"):
        polymap.optimize(load("models/gemv.te"), pins={"i": {"lanes": 8}})


# ------------------------------------------------------------ the proof's own checks


def _laned(text: str):
    program = parse(text).bind_defaults()
    return polymap.optimize(program, pins={"i": {"lanes": 32}})


def test_a_mapping_that_names_the_wrong_operator_is_refused():
    mapping = polymap.optimize(parse(INT_MAX_AND_SUM).bind_defaults(), pins={"i": {"lanes": 32}})
    km = mapping.kernels[0]
    (sp,) = km.spread
    wrong = dataclasses.replace(sp, accumulators=(("s", AssignOp.MAX), ("m", AssignOp.MAX)))
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=(wrong,)),))
    with pytest.raises(VerificationError, match="not spread as the mapping says"):
        polymap.compile(mapping.program, edited)


def test_the_lane_proof_catches_a_local_that_no_fork_carries(monkeypatch):
    """With the shape check deceived (the analysis made to agree with a mapping that drops a
    broadcast), the lane-order proof itself finds the local read on other lanes."""
    program = load("models/softmax_rows.te").bind(M=8, N=40)
    mapping = polymap.optimize(program)
    km = mapping.kernels[0]
    forged = tuple(dataclasses.replace(sp, broadcasts=()) for sp in km.spread)
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=forged),))
    monkeypatch.setattr(prove_lanes, "spread_loops", lambda *a, **k: forged)
    with pytest.raises(
        VerificationError, match="passes a local's value between lanes that no fork or join carries"
    ):
        polymap.compile(mapping.program, edited)


def test_the_lane_proof_catches_a_dependence_inside_one_run_of_a_loop(monkeypatch):
    program = parse(CARRIED).bind_defaults()
    mapping = polymap.optimize(program)
    km = mapping.kernels[0]
    loop = km.kernel.body[0]
    forged = polymap.mapping.space.SpreadLoop((0,), loop.index, ("S0",), (), (), False)
    lanes = [dataclasses.replace(lm, thread_axis=polymap.Axis.Y) for lm in km.loops]
    edited_km = dataclasses.replace(
        km, loops=tuple(lanes), lanes=32, spread=(forged,), staging=None, interleaved=False
    )
    edited = dataclasses.replace(mapping, kernels=(edited_km,))
    monkeypatch.setattr(prove_lanes, "spread_loops", lambda *a, **k: (forged,))
    with pytest.raises(VerificationError, match="on two lanes inside one run of loop 'j'"):
        polymap.compile(mapping.program, edited)


FORK_ORDERED = """param M = 20
param N = 70
in  X: f32[M, N]
inout W: f32[M, 4]
out y: f32[M]
par M i {
  W[i, 3] = X[i, 0] * 2
  seq N j {
    y[i] += W[i, j % 4] * X[i, j]
  }
}
"""


def test_lane_0s_global_write_before_a_spread_loop_reaches_every_lane_through_the_fork():
    program = parse(FORK_ORDERED, name="fork_ordered").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    assert kernel.mapping.kernels[0].lanes == 32
    assert "lane order" in kernel.mapping.report()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20, 70)).astype(np.float32)
    w = rng.standard_normal((20, 4)).astype(np.float32)
    got = kernel.run_host(X=x, W=w.copy())
    w2 = w.astype(np.float64).copy()
    w2[:, 3] = 2 * x[:, 0]
    terms = w2[:, np.arange(70) % 4] * x
    assert np.all(np.abs(got["y"] - terms.sum(axis=1)) <= _sum_bound(terms))


def test_the_json_mapping_and_the_command_line_say_what_the_lanes_do(capsys):
    from polymap.cli import main

    data = polymap.optimize(load("models/gemv.te")).to_json()["kernels"][0]
    assert data["lanes"] == 64 and data["block"][0] == 64
    assert data["spread"] == [
        {
            "index": "j",
            "path": [2],
            "statements": ["S1"],
            "accumulators": [{"buffer": "y_acc", "op": "+="}],
            "broadcasts": [],
            "shared": [],
            "online": [],
            "reassociates": True,
        }
    ]
    assert main(["map", "models/gemv.te", "--no-reassociate"]) == 0
    assert "a warp per point" not in capsys.readouterr().out
    assert main(["map", "models/softmax_rows.te", "--no-reassociate"]) == 0
    out = capsys.readouterr().out  # the max and the normalization are exact: still on the lanes
    assert re.search(r"(a warp|\d+ warps) per point", out) and "partial sum" not in out


def test_layer_norm_maps_to_warps_per_row_and_matches_numpy():
    program = load("models/layernorm.te").bind(M=33, N=100)
    kernel = polymap.compile(program)
    km = kernel.mapping.kernels[0]
    # 33 rows: a block of 4 warps each, one per 32 of its 100 columns (a fifth would idle)
    assert km.lanes == 128 and len(km.spread) == 3
    assert "__syncthreads();" in kernel.source and "__shfl_sync" not in kernel.source
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((33, 100)) * 3 + 1).astype(np.float32)
    gamma, beta = rng.standard_normal(100).astype(np.float32), rng.standard_normal(100).astype(np.float32)
    xd = x.astype(np.float64)
    mean = xd.mean(axis=1, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=1, keepdims=True)
    want = (xd - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(kernel.run_host(X=x, gamma=gamma, beta=beta)["Y"], want, rtol=1e-4, atol=1e-5)


# ------------------------------------------- found by a review that attacked the lanes


def test_a_mapping_that_spreads_a_loop_twice_or_hides_its_reordering_is_refused():
    mapping = polymap.optimize(parse(ROW_SUM).bind_defaults(), pins={"i": {"lanes": 32}, "j": {"split": 1}})
    km = mapping.kernels[0]
    (sp,) = km.spread
    for forged in ((sp, sp), (dataclasses.replace(sp, reassociates=False),)):
        edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=forged),))
        with pytest.raises(VerificationError, match="spreads a loop twice|not spread as the mapping says"):
            polymap.compile(mapping.program, edited)


SELECT_COUNT = """param M = 4
param N = 100
in  F: f32[M, N]
out c: i32[M]
par M i {
  new s: i32
  s = 33554432
  seq N j {
    s += select(F[i, j] > 0, 1, 3)
  }
  c[i] = s
}
"""

NARROW_MIN = """param M = 4
param N = 70
in  L: i64[M, N]
in  W: i64[M, N]
out lo: i32[M]
out total: i32[M]
par M i {
  new m: i32
  new t: i32
  m = 2147483647
  t = 0
  seq N j {
    m min= L[i, j]
    t += W[i, j]
  }
  lo[i] = m
  total[i] = t
}
"""


def test_an_integer_accumulator_that_computes_in_float_or_narrows_a_min_stays_in_a_thread():
    # an f32 value reaches the i32 sum (rounded at 2^25 on each update): the order matters
    float_value = SELECT_COUNT.replace("select(F[i, j] > 0, 1, 3)", "select(F[i, j] > 0, F[i, j], 3)")
    assert _spread(float_value, reassociate=False) == ()
    # a select of integers is an integer whatever its condition reads: exact in any order
    assert _spread(SELECT_COUNT, reassociate=False) != ()
    # min= truncates an i64 value to i32 on each update: the order matters; += wraps alike
    assert _spread(NARROW_MIN) == ()
    assert _spread(NARROW_MIN.replace("    m min= L[i, j]\n", "")) != ()


def test_a_given_mapping_takes_no_reassociate_option():
    program = load("models/gemv.te")
    mapping = polymap.optimize(program)
    with pytest.raises(polymap.ArgumentError, match="reassociate and deterministic belong to optimize"):
        polymap.compile(mapping.program, mapping, reassociate=False)


def test_the_header_names_only_the_float_reductions_a_loop_reorders():
    text = INT_MAX_AND_SUM.replace("out top: i32[M]", "out top: i32[M]\nout f: f32[M]").replace(
        "  m = X[i, 0]\n", "  m = X[i, 0]\n  new g: f32\n  g = 0\n"
    )
    text = text.replace("    m max= X[i, j]\n", "    m max= X[i, j]\n    g += X[i, j] * 0.5\n")
    text = text.replace("  top[i] = m\n", "  top[i] = m\n  f[i] = g\n")
    kernel = polymap.compile(parse(text, name="mixed").bind_defaults(), pins={"i": {"lanes": 32}})
    header = kernel.source.split("extern")[0]
    assert "reorders the float reduction g +=" in header and "s +=" not in header


def test_a_lanes_pin_other_than_1_or_32_times_a_power_of_two_says_what_lanes_can_be():
    for value in (0, 8, 48, 2048, True):
        with pytest.raises(polymap.ArgumentError, match=r"lanes is 1 \(a thread per point\), 32 \(a warp"):
            polymap.optimize(load("models/gemv.te"), pins={"i": {"lanes": value}})


def test_the_picture_of_a_warps_requests_puts_a_spread_loop_on_the_lanes():
    from polymap.plot import warp_requests

    mapping = polymap.optimize(load("models/gemv.te"))
    requests = {r.text: r for r in warp_requests(mapping, mapping.kernels[0])}
    assert requests["read A[i, j]"].addresses == tuple(4 * lane for lane in range(32))
    assert requests["read A[i, j]"].sectors == 4  # as the report's table says
    assert requests["write y[i]"].addresses[1:] == (None,) * 31  # lane 0's alone


ONE_ITERATION_AT_THE_COST_SIZES = """param K = 1, M = 9
out W: f32[M, 3]
in X: f32[M, K]
par M i {
  par 3 d {
    seq K k {
      if d >= 1 { W[i, d] += X[i, k] - d }
    }
  }
}
"""


def test_the_loops_lanes_may_run_are_found_for_every_size_the_proof_covers():
    """Fuzz seed 8461: at the cost size K = 1 the loop has no dependence between iterations,
    at K = 2 it has one (the global update); the lanes' loops come from the symbolic program."""
    program = parse(ONE_ITERATION_AT_THE_COST_SIZES, name="one_iteration")
    kernel = polymap.compile(program)  # proved for every K: spread nothing
    assert kernel.mapping.kernels[0].lanes == 1
    x = np.random.default_rng(6).standard_normal((9, 5)).astype(np.float32)
    want = np.zeros((9, 3))
    want[:, 1:] = x.astype(np.float64).sum(axis=1, keepdims=True) - 5 * np.arange(1, 3)
    np.testing.assert_allclose(kernel.run_host(X=x)["W"], want, rtol=1e-5, atol=1e-5)


# ------------------------------------- several warps per point: a block and its shared tree


def test_a_row_sum_on_a_block_of_warps_combines_them_in_shared_memory_within_the_bound():
    program = parse(ROW_SUM, name="row_sum").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 256}, "j": {"split": 1}})
    km = kernel.mapping.kernels[0]
    assert km.lanes == 256 and km.block_dim() == (256, 1, 1)
    assert (
        "y_acc_warps[tx / 32] = y_acc;" in kernel.source
        and "__shared__ float y_acc_warps[8];" in kernel.source
    )
    assert "8 warps per point (a block each)" in kernel.source.split("extern")[0]
    x = np.random.default_rng(7).standard_normal((70, 1000)).astype(np.float32)
    got = kernel.run_host(X=x)["y"]
    exact = x.astype(np.float64).sum(axis=1)
    assert np.all(np.abs(got - exact) <= _sum_bound(x.astype(np.float64)))
    ptx = kernel.ptx()
    assert "bar.sync" in ptx and "shfl.sync.bfly" in ptx


@pytest.mark.parametrize("lanes", [64, 1024])
def test_integer_sums_and_maxima_on_a_block_of_warps_are_exact(lanes):
    # the max starts from lane 0's value (X[i, 0]), shared through shared memory at the fork;
    # at 1024 lanes 947 of them have no column and combine only their starts
    program = parse(INT_MAX_AND_SUM, name="int_reduce").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    assert kernel.mapping.kernels[0].lanes == lanes
    assert "m_shared = m;" in kernel.source
    x = np.random.default_rng(8).integers(-1000, 1000, (40, 77)).astype(np.int32)
    x[3] = -5  # a row whose maximum is its first element, everywhere
    got = kernel.run_host(X=x)
    np.testing.assert_array_equal(got["total"], (x.astype(np.int64) * 3).sum(axis=1))
    np.testing.assert_array_equal(got["top"], x.max(axis=1))


def test_warps_per_point_take_a_block_each_so_the_band_has_no_threads():
    program = parse(BATCHED_ROW_SUM, name="batched").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 64}})
    km = kernel.mapping.kernels[0]
    assert km.lanes == 64 and all(lm.threads == 1 for lm in km.loops)
    x = np.random.default_rng(9).standard_normal((3, 5, 45))
    np.testing.assert_allclose(kernel.run_host(X=x)["y"], (x * x).sum(axis=2), rtol=1e-13)


def test_scip_gives_the_masked_softmax_a_block_per_row_and_fills_the_gpu():
    # 1024 rows: a warp each fills 12% of the GPU's thread slots; a block of several fills it
    program = load("models/masked_softmax.te")
    mapping = polymap.optimize(program)
    # unsplit: a split of its loops would fill the GPU another way (tests/test_split.py)
    warp = polymap.optimize(program, pins={"i": {"lanes": 32}, "j": {"split": 1}})
    assert mapping.kernels[0].lanes > 32
    assert mapping.costs[0].fill >= 0.9 > warp.costs[0].fill
    assert mapping.predicted_time_s * 4 < warp.predicted_time_s


def test_a_forged_block_of_warps_with_band_threads_or_an_odd_lane_count_is_refused():
    mapping = polymap.optimize(
        parse(BATCHED_ROW_SUM, name="batched").bind_defaults(), pins={"i": {"lanes": 32, "threads": 4}}
    )
    km = mapping.kernels[0]
    assert any(lm.threads > 1 for lm in km.loops)
    for lanes, why in ((64, "a block is one band point"), (96, "lanes must be 1")):
        edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, lanes=lanes),))
        with pytest.raises(VerificationError, match=why):
            polymap.compile(mapping.program, edited)


def test_a_band_of_a_few_long_rows_gets_a_block_of_warps_each():
    # 8 rows fill less than a warp's worth of band points (a "tiny" band: one warp a block);
    # with lanes, a block of warps per row is still open to SCIP (found by a review: it
    # kept a warp per row, 26 times slower in the model's own prediction)
    text = ROW_SUM.replace("param M = 70", "param M = 8").replace("param N = 1000", "param N = 3000")
    program = parse(text, name="few_rows").bind_defaults()
    kernel = polymap.compile(program, pins={"j": {"split": 1}})
    warp = polymap.optimize(program, pins={"i": {"lanes": 32}, "j": {"split": 1}})
    assert kernel.mapping.kernels[0].lanes > 32
    assert kernel.mapping.predicted_time_s * 10 < warp.predicted_time_s
    x = np.random.default_rng(10).standard_normal((8, 3000)).astype(np.float32)
    got = kernel.run_host(X=x)["y"]
    assert np.all(np.abs(got - x.astype(np.float64).sum(axis=1)) <= _sum_bound(x.astype(np.float64)))


def test_the_shared_memory_of_a_blocks_combines_is_in_the_report():
    program = parse(INT_MAX_AND_SUM, name="int_reduce").bind_defaults()
    mapping = polymap.optimize(program, pins={"i": {"lanes": 256}})
    # s: 8 partials of 4 bytes; m: 8 partials and its start shared by lane 0
    assert mapping.costs[0].shared_bytes == 8 * 4 + 8 * 4 + 4
    assert "68 bytes of shared memory per block" in str(mapping)


def test_lanes_need_a_warp_of_32_and_a_given_block_within_the_target():
    from polymap.targets import H100

    program = parse(ROW_SUM, name="row_sum").bind_defaults()
    wide = dataclasses.replace(H100, warp_size=64, name="wide-warp GPU")
    assert polymap.optimize(program, target=wide, pins={"j": {"split": 1}}).kernels[0].lanes == 1
    with pytest.raises(polymap.ArgumentError, match="warps of 32 lanes and wide-warp GPU has warps of 64"):
        polymap.optimize(program, target=wide, pins={"i": {"lanes": 64}})
    small = dataclasses.replace(H100, max_threads_per_block=256, name="small GPU")
    mapping = polymap.optimize(program, target=small, pins={"i": {"lanes": 256}, "j": {"split": 1}})
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(mapping.kernels[0], lanes=1024),))
    with pytest.raises(
        polymap.ArgumentError, match="block of 1024x1x1 threads is beyond what small GPU launches"
    ):
        polymap.compile(mapping.program, edited)
