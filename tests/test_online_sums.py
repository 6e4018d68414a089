"""Online sums (issue 12, ``ir/online_sums.py``): the one-pass softmax's running maximum and
the sums kept relative to it spread over the lanes of a warp or a block; which loops
qualify, the proof's check of the mapping, and the emitted code on the host against values
computed here in float64."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest

import polymap
from polymap.errors import VerificationError
from polymap.ir.nodes import AssignOp
from polymap.ir.parse import load, parse
from polymap.mapping.lanes import spread_loops
from polymap.mapping.space import kernels
from polymap.pipeline import Analyses, transform
from polymap.poly.model import analyze

U32 = 2.0**-24  # the unit roundoff of f32

# a softmax-weighted mean of V per row and the row's log-sum-exp: two sums relative to one
# maximum, written in the other orders the form allows (max(x, m), the new term first,
# exp(..) * s)
WEIGHTED = """param M = 37
param N = 1000
in  X: f32[M, N]
in  V: f32[M, N]
out avg: f32[M]
out lse: f32[M]
par M i {
  new mx: f32
  new den: f32
  new num: f32
  mx = X[i, 0]
  den = 0
  num = 0
  seq N j {
    new top: f32
    top = max(X[i, j], mx)
    num = V[i, j] * exp(X[i, j] - top) + exp(mx - top) * num
    den = den * exp(mx - top) + exp(X[i, j] - top)
    mx = top
  }
  avg[i] = num / den
  lse[i] = mx + log(den)
}
"""


def _spread(text: str, *, reassociate: bool = True):
    program = transform(parse(text).bind_defaults(), registers=True, analyses=Analyses())
    (kernel,) = kernels(program)
    return spread_loops(kernel, analyze(program), reassociate=reassociate)


def _rows(rng, m: int, n: int) -> np.ndarray:
    """Random rows, and rows whose maximum grows at every step (each step rescales the sum)
    or comes first (no step does)."""
    x = (rng.standard_normal((m, n)) * 6).astype(np.float32)
    x[5] = np.linspace(-50, 50, n)
    x[6] = np.linspace(50, -50, n)
    return x


def test_the_online_softmax_spreads_its_maximum_and_sum_as_one_group():
    (online, write) = _spread(open("models/softmax_rows_online.te").read())
    assert online.index == "j" and online.reassociates
    assert dict(online.accumulators) == {"mx": AssignOp.MAX, "sum": AssignOp.ADD}
    assert online.online == (("mx", ("sum",)),) and online.relative_to == {"sum": "mx"}
    assert write.accumulators == () and write.broadcasts == ("mx", "sum")
    (loop,) = _spread(WEIGHTED)
    assert loop.online == (("mx", ("num", "den")),)


@pytest.mark.parametrize(
    "edit",
    [
        ("exp(mx - top) * num", "exp(mx - X[i, j]) * num"),  # not rescaled to the new maximum
        ("V[i, j] * exp(X[i, j] - top)", "den * exp(X[i, j] - top)"),  # a term of another sum
        ("    mx = top\n", "    mx = top\n    lse[i] = top\n"),  # a lane's running maximum stored
        ("    mx = top\n", "    mx = top\n    den = den + 0\n"),  # a sum updated twice
        ("top = max(X[i, j], mx)", "top = max(X[i, j], num)"),  # not the running maximum
        ("in  V: f32", "in  V: f64"),  # computes in f64, rounded to f32 on each step
        ("den * exp(mx - top) + exp(X[i, j] - top)", "den * exp(mx - top) + exp(V[i, j] - top)"),
        ("mx = X[i, 0]", "mx = -inf"),  # a masked first element on a lane: exp(-inf - -inf)
        (
            "    den = den * exp(mx - top)",
            "    mx = mx * exp(mx - top) + exp(X[i, j] - top)\n    den = den * exp(mx - top)",
        ),
        # an if around the sums and the move but not the maximum: a lane's top would differ
        ("    top = max(X[i, j], mx)\n", "    top = max(X[i, j], mx)\n    if j > 3 {\n"),
    ],
    ids=[
        "scale",
        "other-sum",
        "top-read",
        "twice",
        "max-of-sum",
        "f64",
        "other-exponent",
        "inf-start",
        "max-as-sum",
        "guarded",
    ],
)
def test_a_loop_outside_the_form_stays_in_one_thread(edit):
    old, new = edit
    text = WEIGHTED.replace(old, new)
    if "if j > 3" in text:  # two of the three statements under a condition on the iteration
        text = text.replace("    mx = top\n", "    mx = top\n    }\n")
    assert text != WEIGHTED
    assert _spread(text) == ()


def test_one_if_of_the_iteration_around_the_whole_group_skips_it_on_its_lane():
    # a split's part runs its iterations under one guard (transform/split_online.py): the
    # group under it is still an online sum, and the lanes skip an iteration as a whole
    text = WEIGHTED.replace(
        "  seq N j {\n    new top: f32\n", "  seq N j {\n    new top: f32\n    if j % 3 != 1 {\n"
    )
    text = text.replace("    mx = top\n", "    mx = top\n    }\n")
    (loop,) = _spread(text)
    assert loop.online == (("mx", ("num", "den")),)
    program = parse(text).bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": 64}})
    assert kernel.mapping.kernels[0].lanes == 64
    rng = np.random.default_rng(4)
    inputs = {"X": _rows(rng, 37, 1000), "V": rng.standard_normal((37, 1000)).astype(np.float32)}
    want, got = polymap.reference(program, **inputs), kernel.run_host(**inputs)
    for name in ("avg", "lse"):
        np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=1e-5)


def test_lanes_without_elements_combine_at_an_infinite_start_without_nan():
    # the maximum starts from the data (-inf here) and a warp holds rows of 5: 27 lanes see
    # no element and keep (-inf, 0), which the butterfly combines; exp(-inf - -inf) is NaN
    text = WEIGHTED.replace("in  V: f32[M, N]", "in  V: f32[M, N]\nin  S: f32[M]").replace(
        "mx = X[i, 0]", "mx = S[i]"
    )
    program = parse(text, name="weighted").bind(M=37, N=5)
    kernel = polymap.compile(program, pins={"i": {"lanes": 32}})
    assert kernel.mapping.kernels[0].spread[0].online == (("mx", ("num", "den")),)
    rng = np.random.default_rng(5)
    x, v = rng.standard_normal((37, 5)).astype(np.float32), rng.standard_normal((37, 5)).astype(np.float32)
    s = np.full(37, -np.inf, np.float32)
    got, ref = kernel.run_host(X=x, V=v, S=s), polymap.reference(program, X=x, V=v, S=s)
    assert np.isfinite(ref["lse"]).all() and np.isfinite(got["lse"]).all()
    np.testing.assert_allclose(got["lse"], ref["lse"], rtol=1e-6)
    np.testing.assert_allclose(got["avg"], ref["avg"], rtol=1e-5, atol=1e-6)


def test_without_reassociation_an_online_sum_stays_in_one_thread():
    assert _spread(WEIGHTED, reassociate=False) == ()
    kernel = polymap.compile(parse(WEIGHTED, name="weighted").bind_defaults(), reassociate=False)
    assert kernel.mapping.kernels[0].lanes == 1


@pytest.mark.parametrize("lanes", [32, 64, 1024])
def test_the_online_softmax_on_lanes_matches_numpy(lanes):
    # 1024 lanes for rows of 1000: 24 lanes see no element and combine (X[i, 0], 0)
    program = load("models/softmax_rows_online.te").bind(M=37, N=1000)
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    assert kernel.mapping.kernels[0].lanes == lanes
    x = _rows(np.random.default_rng(lanes), 37, 1000)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    # the sum of 1000 terms in two orders, each term rounded a few times on its way: both
    # within 2 (n - 1) u of the exact sum, relative (the terms are positive), and each output
    # within that of its own exact value
    rtol = 2 * 999 * U32 + 8 * U32
    np.testing.assert_allclose(kernel.run_host(X=x)["Y"], want, rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(polymap.reference(program, X=x)["Y"], want, rtol=rtol, atol=1e-30)


@pytest.mark.parametrize("lanes", [32, 256])
def test_two_sums_relative_to_one_maximum_on_lanes_match_numpy(lanes):
    program = parse(WEIGHTED, name="weighted").bind_defaults()
    kernel = polymap.compile(program, pins={"i": {"lanes": lanes}})
    assert kernel.mapping.kernels[0].lanes == lanes
    source = kernel.source
    assert "pm_lanes_online(mx, num, den);" in source
    assert ("pm_online_rescale(mx, mx_warps[pm_w]" in source) == (lanes > 32)
    rng = np.random.default_rng(11)
    x, v = _rows(rng, 37, 1000), rng.standard_normal((37, 1000)).astype(np.float32)
    got = kernel.run_host(X=x, V=v)
    x64 = x.astype(np.float64)
    top = x64.max(axis=1)
    w = np.exp(x64 - top[:, None])
    # log-sum-exp: the sum within 2 (n - 1) u relative, so its log within that absolute
    np.testing.assert_allclose(got["lse"], top + np.log(w.sum(axis=1)), rtol=4 * U32, atol=2 * 1000 * U32)
    # the weighted mean: the numerator's terms have both signs, bounded by sum |w v|
    bound = 2 * 1000 * U32 * (np.abs(w * v).sum(axis=1) + np.abs((w * v).sum(axis=1))) / w.sum(axis=1)
    assert np.all(np.abs(got["avg"] - (w * v).sum(axis=1) / w.sum(axis=1)) <= bound + 1e-6)


def test_scip_spreads_the_online_softmax_and_the_code_compiles_for_the_gpu():
    kernel = polymap.compile(load("models/softmax_rows_online.te").bind(M=4096, N=2048))
    km = kernel.mapping.kernels[0]
    assert km.lanes >= 32 and km.spread[0].online == (("mx", ("sum",)),)
    report = kernel.mapping.report()
    assert "sum += (online, relative to mx)" in report
    assert "reorders the float reduction sum += (online, relative to mx)" in kernel.source
    ptx = kernel.ptx()
    assert "shfl.sync.bfly" in ptx and "ex2.approx" in ptx
    data = kernel.mapping.to_json()["kernels"][0]["spread"][0]
    assert data["online"] == [{"maximum": "mx", "sums": ["sum"]}]


def test_a_mapping_that_combines_the_group_as_separate_reductions_is_refused():
    mapping = polymap.optimize(
        load("models/softmax_rows_online.te").bind(M=64, N=300), pins={"i": {"lanes": 32}}
    )
    km = mapping.kernels[0]
    forged = (dataclasses.replace(km.spread[0], online=()), *km.spread[1:])
    edited = dataclasses.replace(mapping, kernels=(dataclasses.replace(km, spread=forged),))
    with pytest.raises(VerificationError, match="not spread as the mapping says"):
        polymap.compile(mapping.program, edited)


def test_a_maximum_started_at_minus_inf_keeps_the_loop_in_one_thread_and_says_why(capsys):
    from polymap.cli import main

    text = WEIGHTED.replace("mx = X[i, 0]", "mx = -inf")
    mapping = polymap.optimize(parse(text, name="weighted").bind_defaults())
    assert mapping.kernels[0].lanes == 1
    (note,) = mapping.notes
    assert note.startswith("note: loop 'j' at 14:3 keeps 'num', 'den' relative to the running maximum 'mx'")
    assert "starts from -inf" in note and "-1e30" in note and note in str(mapping)
    finite = polymap.optimize(parse(text.replace("-inf", "-1e30"), name="weighted").bind_defaults())
    assert finite.notes == () and finite.kernels[0].spread[0].online == (("mx", ("num", "den")),)
    path = Path(tempfile.mkdtemp()) / "weighted.te"
    path.write_text(text)
    assert main(["check", str(path)]) == 0
    assert "(an online sum), but 'mx' starts from -inf" in capsys.readouterr().out
