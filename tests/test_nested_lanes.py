"""Spread loops inside loops of the thread body (issue 12): a reduction inside a sequential
iteration loop runs on the lanes once per step (``mapping/lanes.py``), with a fork and a
join at each step; the outputs on the host against values computed here, exactly for
integers and within the reordered sum's bound for floats."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_models import _sparsemax_rows

import polymap
from polymap import prove_lanes
from polymap.errors import VerificationError
from polymap.ir.nodes import AssignOp
from polymap.ir.parse import load, parse
from polymap.mapping.lanes import spread_loops
from polymap.mapping.solve import KernelProblem
from polymap.mapping.space import Pins, kernels
from polymap.pipeline import Analyses, transform
from polymap.poly.model import analyze
from polymap.targets import H100

U32 = 2.0**-24  # the unit roundoff of f32

# the running total is not reset between the steps of t: each step's lanes start their
# partial at 0 (the identity) and lane 0 carries the total, so step t ends with the sum
# of W[0..t] times the row's sum
CARRIED_TOTAL = """param M = 40
param N = 77
param T = 3
in  X: i32[M, N]
in  W: i32[T]
out Y: i32[M, T]
par M i {
  new s: i32
  s = 0
  seq T t {
    seq N j {
      s += X[i, j] * W[t]
    }
    Y[i, t] = s
  }
}
"""

# the inner loop is a running sum (its value is stored at every j) and the outer loop
# halves the total it carries: neither may be spread
RUNNING_INSIDE_CARRIED = """param M = 8
param N = 50
param T = 3
in  X: f32[M, N]
out Y: f32[M, T, N]
par M i {
  new s: f32
  s = 0
  seq T t {
    s = s * 0.5
    seq N j {
      s += X[i, j]
      Y[i, t, j] = s
    }
  }
}
"""

# the same running sum, restarted at each t from nothing: the iterations of t are
# independent, so t is spread (each lane runs whole steps) and j stays inside its lane
RUNNING_PER_STEP = """param M = 8
param N = 50
param T = 40
in  X: f32[M, N]
out Y: f32[M, T, N]
par M i {
  seq T t {
    new s: f32
    s = t
    seq N j {
      s += X[i, j]
      Y[i, t, j] = s
    }
  }
}
"""


def _spread(text: str):
    program = transform(parse(text).bind_defaults(), registers=True, analyses=Analyses())
    (kernel,) = kernels(program)
    return spread_loops(kernel, analyze(program))


def _sparsemax(x: np.ndarray) -> np.ndarray:
    """The closed form of sparsemax, in float64 (test_models' NumPy formulation)."""
    return _sparsemax_rows({"X": x}, {})["Y"]


# ------------------------------------------------------------------ which loops


def test_a_reduction_inside_a_sequential_loop_is_spread_and_the_loop_around_it_is_not():
    program = transform(load("models/sparsemax_rows.te"), registers=True, analyses=Analyses())
    loops = spread_loops(kernels(program)[0], analyze(program))
    # the row maximum, the mass inside the bisection's step loop, the output
    assert [(sp.path, sp.accumulators, sp.broadcasts) for sp in loops] == [
        ((6,), (("mx", AssignOp.MAX),), ()),
        ((9, 2), (("mass", AssignOp.ADD),), ("tau",)),
        ((11,), (), ("tau",)),
    ]
    assert [sp.depth for sp in loops] == [0, 1, 0]


def test_a_running_sum_is_spread_neither_inside_nor_around():
    assert _spread(RUNNING_INSIDE_CARRIED) == ()
    (outer,) = _spread(RUNNING_PER_STEP)  # the independent steps, each whole on a lane
    assert outer.path == (0,) and outer.index == "t" and outer.accumulators == ()


def test_each_run_of_a_nested_spread_loop_pays_its_fork_and_join():
    program = load("models/sparsemax_rows.te").bind_defaults()
    program = transform(program, registers=True, analyses=Analyses())
    model = analyze(program)
    problem = KernelProblem.build(kernels(program)[0], model, H100, Pins(), None)
    assert problem.spread_runs == (1, 24, 1)


# the spread loop k runs once per step of r (a recurrence, never spread), and row i has
# i + 1 steps: 64 * 65 / 2 runs over the 64 rows, 32.5 a row (the largest extent, 64 a row,
# counted the triangle twice)
TRIANGLE_AROUND = """
param N = 64
param M = 256
in  A: f32[N, M]
out O: f32[N]
par N i {
  new c: f32
  c = 0
  seq i + 1 r {
    new s: f32
    s = 0
    seq M k {
      s += A[r, k]
    }
    c = c * 0.5 + s
  }
  O[i] = c
}
"""


def test_a_spread_loop_inside_a_triangular_loop_runs_as_often_as_the_triangle_has_steps():
    program = parse(TRIANGLE_AROUND, name="triangle").bind_defaults()
    program = transform(program, registers=True, analyses=Analyses())
    model = analyze(program)
    problem = KernelProblem.build(kernels(program)[0], model, H100, Pins(), None)
    assert [sp.index for sp in problem.spread] == ["k"]
    assert problem.spread_runs == (-(-64 * 65 // 2 // 64),)  # 33: the mean, rounded up


# ------------------------------------------------------------------ mapped and run


def test_scip_spreads_the_bisections_mass_and_predicts_less_than_one_lane_alone():
    program = load("models/sparsemax_rows.te")
    spread = polymap.optimize(program)
    km = spread.kernels[0]
    assert km.lanes >= 32 and [sp.path for sp in km.spread] == [(6,), (9, 2), (11,)]
    alone = polymap.optimize(program, pins={"i": {"lanes": 1}})
    # lane 0 alone reads the row 24 times a sector per element; the lanes read it coalesced
    assert spread.predicted_time_s < alone.predicted_time_s / 4
    report = spread.report()
    assert "loop 'j' at 38:5: partial mass += combined" in report
    assert "lane order" in report


@pytest.mark.parametrize("lanes", [32, 128])
def test_sparsemax_by_bisection_on_the_lanes_matches_the_closed_form(lanes):
    program = load("models/sparsemax_rows.te").bind(M=37, N=300)
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    assert kernel.mapping.kernels[0].lanes == lanes
    source = kernel.source
    assert "for (int j_step = 0;" in source and "pm_lanes_add(mass)" in source
    x = (np.random.default_rng(11).standard_normal((37, 300)) * 3).astype(np.float32)
    got = kernel.run_host(X=x)["Y"]
    # tau's error: the bisection's last interval (2^-24 wide), each midpoint rounded (an
    # ulp of the largest entry), and a step that goes the other way where the reordered
    # mass is within its sum's bound of 1 (the terms are >= 0 and add up to about 1, so
    # 2 (n - 1) u); the mass falls at least 1 per unit of tau, so tau moves by no more
    bound = 2**-24 + 4 * 2**-23 * np.abs(x).max() + 2 * (300 - 1) * U32 * 1.01
    assert np.all(np.abs(got - _sparsemax(x)) <= bound)
    assert np.all(np.abs(got - polymap.reference(program, X=x)["Y"]) <= 2 * bound)
    assert (got == 0).mean() > 0.9  # sparse: most of each row is exactly 0
    ptx = kernel.ptx()
    assert "shfl.sync.bfly" in ptx


@pytest.mark.parametrize("lanes", [32, 64])
def test_a_total_carried_across_the_runs_of_a_spread_loop_is_exact(lanes):
    program = parse(CARRIED_TOTAL, name="carried_total").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    km = kernel.mapping.kernels[0]
    # the loop over j, after W[t]'s load before it (``W_held``, invariant_reads.py)
    assert km.lanes == lanes and [sp.path for sp in km.spread] == [(2, 2)]
    rng = np.random.default_rng(12)
    x = rng.integers(-1000, 1000, (40, 77)).astype(np.int32)
    w = rng.integers(-5, 6, 3).astype(np.int32)
    got = kernel.run_host(X=x, W=w)["Y"]
    rows = x.astype(np.int64).sum(axis=1)
    np.testing.assert_array_equal(got, rows[:, None] * np.cumsum(w.astype(np.int64))[None, :])


def test_independent_steps_spread_whole_over_the_lanes_keep_their_running_sums():
    program = parse(RUNNING_PER_STEP, name="running_per_step").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    x = np.random.default_rng(13).integers(-8, 8, (8, 50)).astype(np.float32)  # exact sums
    got = kernel.run_host(X=x)["Y"]
    want = np.arange(40)[None, :, None] + np.cumsum(x, axis=1)[:, None, :]
    np.testing.assert_array_equal(got, want)


# (from a review) two levels of loops around the spread loop, the inner one triangular, a
# spread extent that depends on the band index and on the loop around it, a local of the
# inner loop broadcast at each fork
DEPTH_TWO = """param M = 5
param N = 70
param T = 4
in  X: i32[M, N]
out Y: i32[M, T, T]
par M i {
  new c: i32
  c = 1
  seq T t {
    c = c * 3 + t
    seq t + 1 u {
      new s: i32
      s = c + u
      seq N - i - u j {
        s += X[i, j + u] * c
      }
      Y[i, t, u] = s
      c = c + s % 7
    }
  }
}
"""

# (from a review) two spread loops in one seq loop, one accumulator carried through both
# and through lane 0 between them, and an integer *= accumulator
TWO_IN_ONE_STEP = """param M = 4
param N = 200
param T = 3
in  X: i32[M, N]
out Y: i32[M, T]
out Z: i32[M]
par M i {
  new s: i32
  new p: i32
  s = 0
  p = 1
  seq T t {
    seq N j {
      s += X[i, j]
    }
    s = s * 2
    seq N - 3 j {
      s += X[i, j + 3] * t
      p *= (X[i, j] % 3) + 1 - 2 * (X[i, j] % 2)
    }
    Y[i, t] = s
  }
  Z[i] = p
}
"""


@pytest.mark.parametrize(
    ("text", "paths"), [(DEPTH_TWO, [(2, 1, 2)]), (TWO_IN_ONE_STEP, [(4, 0), (4, 2)])], ids=["depth2", "two"]
)
@pytest.mark.parametrize("lanes", [32, 256])
def test_integer_reductions_nested_deeper_or_side_by_side_are_exact(text, paths, lanes):
    program = parse(text, name="nested").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    km = kernel.mapping.kernels[0]
    assert km.lanes == lanes and [sp.path for sp in km.spread] == paths
    x = (
        np.random.default_rng(15)
        .integers(-100, 100, (program.sizes["M"], program.sizes["N"]))
        .astype(np.int32)
    )
    got, want = kernel.run_host(X=x), polymap.reference(program, X=x)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


# ------------------------------------------------------------------ the proof


def test_the_lane_proof_catches_a_nested_spread_loop_that_drops_its_accumulator(monkeypatch):
    program = parse(CARRIED_TOTAL, name="carried_total").bind_defaults()
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32}})
    km = mapping.kernels[0]
    (sp,) = km.spread
    forged = dataclasses.replace(sp, accumulators=(), reassociates=False)
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=(forged,)),))
    monkeypatch.setattr(prove_lanes, "spread_loops", lambda *a, **k: (forged,))
    with pytest.raises(VerificationError, match="passes a local's value between lanes that no fork or join"):
        polymap.compile(mapping.program, edited)


# each step t adds the row into Y shifted by t: an element is updated once per step, at
# another j, so on another lane, in another run of the spread loop (a join between)
SHIFTED_SUMS = """param M = 6
param N = 70
param T = 4
in  X: f32[M, N]
out Y: f32[M, N + T]
par M i {
  seq T t {
    seq N j {
      Y[i, j + t] += X[i, j]
    }
  }
}
"""


def test_a_value_passed_between_lanes_across_runs_is_kept_by_the_join_between_them():
    # the proof's "one run" is one band point and one iteration of the loops around the
    # spread loop: these updates of one element are on two lanes but in two runs
    program = parse(SHIFTED_SUMS, name="shifted_sums").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    assert [sp.path for sp in kernel.mapping.kernels[0].spread] == [(0, 0)]
    x = np.random.default_rng(14).integers(-8, 8, (6, 70)).astype(np.float32)  # exact sums
    want = np.zeros((6, 74), np.float32)
    for t in range(4):
        want[:, t : t + 70] += x
    np.testing.assert_array_equal(kernel.run_host(X=x)["Y"], want)


def test_spreading_the_sequential_loop_around_the_reduction_is_refused():
    program = parse(CARRIED_TOTAL, name="carried_total").bind_defaults()
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32}})
    km = mapping.kernels[0]
    (sp,) = km.spread
    outer = dataclasses.replace(sp, path=(2,), index="t")  # the steps of t on the lanes
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=(outer,)),))
    with pytest.raises(VerificationError, match="loop 't' at position 2 of the body is not spread"):
        polymap.compile(mapping.program, edited)
