"""``if cond { .. } else { .. }`` on loop indices and sizes (issue 13): each statement inside
gets the condition as its guard, which restricts its domain in isl, so the bounds, race
and dependence proofs see it, the emitted code gets the guard from isl's AST, and the
reference runs only the instances where it holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from oracle import run_oracle

import polymap
from polymap.errors import BoundsError, ParseError, ProgramError, RaceError
from polymap.ir.parse import parse
from polymap.reference import reference

ROOT = Path(__file__).resolve().parent.parent


def _statements(program):
    out = []

    def visit(block):
        for s in block:
            if hasattr(s, "body"):
                visit(s.body)
            elif hasattr(s, "guard"):
                out.append(s)

    visit(program.body)
    return out


def test_if_else_if_else_gives_each_statement_its_guard_and_prints_back():
    text = (
        "param N = 8\nout y: i32[N]\npar N i {\n"
        "  if i < 2 { y[i] = 1 } else if i >= N - 2 { y[i] = 3 } else { y[i] = 2 }\n}"
    )
    program = parse(text)
    first, last, middle = _statements(program)
    assert str(first.guard) == "i < 2"
    assert str(last.guard) == "not i < 2 and i >= N - 2"
    assert str(middle.guard) == "not i < 2 and not i >= N - 2"  # the else of both
    assert parse(str(program)) == program
    np.testing.assert_array_equal(reference(program.bind_defaults())["y"], [1, 1, 2, 2, 2, 2, 3, 3])


def test_the_guard_restricts_the_domain_so_the_proofs_see_it():
    # without the if, i = 0 reads x[-1]; with it, the read is proved in bounds
    unguarded = "param N = 8\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i - 1] }"
    with pytest.raises(BoundsError):
        polymap.analyze(parse(unguarded))
    polymap.analyze(parse(unguarded.replace("y[i] = x[i - 1]", "if i >= 1 { y[i] = x[i - 1] }")))
    # without the if, i = 2k and i = 2k + 1 write the same element: a race
    halves = "param N = 16\nassume N % 2 == 0\nin x: f32[N]\nout y: f32[N / 2]\npar N i { y[i / 2] = x[i] }"
    with pytest.raises(RaceError):
        polymap.analyze(parse(halves))
    program = parse(halves.replace("y[i / 2] = x[i]", "if i % 2 == 0 { y[i / 2] = x[i] }"))
    x = np.arange(16, dtype=np.float32)
    kernel = polymap.compile(program)
    np.testing.assert_array_equal(kernel.run_host(x=x)["y"], x[::2])
    np.testing.assert_array_equal(reference(program, x=x)["y"], x[::2])


def test_an_if_inside_a_reduction_runs_only_its_instances_everywhere():
    text = (
        "param N = 12\nin x: f32[N]\nout lower: f32[N]\nout upper: f32[N]\n"
        "par N i {\n  seq N j {\n    if j <= i { lower[i] += x[j] } else { upper[i] max= x[j] }\n  }\n}"
    )
    program = parse(text).bind_defaults()
    x = np.random.default_rng(5).standard_normal(12).astype(np.float32)
    want = reference(program, x=x)
    oracle, _ = run_oracle(program, {"x": x})
    kernel = polymap.compile(program)
    host = kernel.run_host(x=x)
    kernel.ptx()
    np.testing.assert_allclose(want["lower"], np.cumsum(x.astype(np.float64)), rtol=1e-5)
    upper = [x[i + 1 :].max() if i < 11 else 0 for i in range(12)]
    np.testing.assert_array_equal(want["upper"], np.maximum(upper, 0))  # out buffers start at 0
    for name in ("lower", "upper"):
        np.testing.assert_array_equal(oracle[name], want[name])
        np.testing.assert_array_equal(host[name], want[name])


def test_padded_convolution_model_equals_numpys_zero_padded_convolution():
    program = polymap.load(ROOT / "models/conv2d_padded.te").bind(H=13, W=17)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((13, 17)).astype(np.float32)
    k = rng.standard_normal((3, 3)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), 1)
    want = sum(k[a, b] * padded[a : a + 13, b : b + 17] for a in range(3) for b in range(3))
    got = reference(program, X=x, K=k)["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(polymap.compile(program).run_host(X=x, K=k)["Y"], got)


@pytest.mark.parametrize(
    "body, cls, message",
    [
        ("if x[i] { y[i] = 1 }", ProgramError, r"5:14: 'if' takes a condition: a comparison of values"),
        ("if i { y[i] = 1 }", ProgramError, r"5:14: 'if' takes a condition"),
        ("if i > 0 { new t: f32\n t = 1 }", ProgramError, r"5:22: 'new t' inside an if: declare it before"),
        ("else { y[i] = 1 }", ParseError, r"5:11: 'else' without an 'if'"),
        ("if i > 0 y[i] = 1", ParseError, r"expected '\{' to open the body of 'if'"),
    ],
)
def test_a_bad_if_is_an_error_at_its_position(body, cls, message):
    text = f"param N = 4\nin x: f32[N]\nout y: f32[N]\npar N i {{\n{' ' * 10}{body}\n}}"
    with pytest.raises(cls, match=message):
        parse(text, source="t.te")


@pytest.mark.parametrize(
    "text, arrays",
    [
        # the if narrows the mapped loop: the grid must still cover the loop, and the proof
        # must assume that grid (it assumed the few blocks the guarded rows need, while the
        # launcher ran them all: every block added x[i] again)
        ("param N = 200\nin x: f32[N]\nout y: f32[N]\npar N i { if i < 3 { y[i] += x[i] } }", {"x": (200,)}),
        (
            "param M = 33, N = 65, K = 17\nin B: f32[K, N]\nout C: f32[M, N]\n"
            "par M i { par N j { if i <= 3 { C[i, j] = B[i % K, j] - 1 } } }",
            {"B": (17, 65)},
        ),
    ],
)
def test_an_if_that_narrows_a_mapped_loop_of_a_bound_program_runs_each_instance_once(text, arrays):
    program = parse(text).bind_defaults()
    rng = np.random.default_rng(2)
    inputs = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in arrays.items()}
    want = reference(program, **inputs)
    got = polymap.compile(program).run_host(**inputs)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_guards_leave_the_mapping_problem_that_of_the_loops():
    # four guarded statements, with or, not and %: the guards' pieces once made SCIP's
    # lane systems so much harder that this 9 x 11 program stopped at the time limit (30 s,
    # gap 5%); the cost charges a guarded statement for its loops' instances, as here
    text = (
        "param N = 9, M = 11\nin A: f32[N, M]\nout r: f32[N, M]\npar N i { par M j {\n"
        "  if i < j and (i + j) % 3 == 0 { r[i, j] = 1 }\n"
        "  if i < j and not (i + j) % 3 == 0 and not j > 2 * i { r[i, j] = 2 }\n"
        "  if i < j and not (i + j) % 3 == 0 and j > 2 * i { r[i, j] = A[i, j] }\n"
        "  if not i < j and (i == j or i == j + 1) { r[i, j] = 5 }\n} }"
    )
    program = parse(text)
    mapping = polymap.optimize(program, time_limit=10)
    assert [r.status for r in mapping.solver] == ["optimal"]
    a = np.random.default_rng(4).standard_normal((9, 11)).astype(np.float32)
    want = reference(program.bind_defaults(), A=a)["r"]
    np.testing.assert_array_equal(polymap.compile(program, mapping).run_host(A=a)["r"], want)


def test_a_statement_isl_shifts_gets_its_index_value_without_shadowing_the_iterator():
    """isl generates the odd iterations as ``S1(k + 1)`` inside the loop over the even ones;
    the value ``= k`` of S1 is then ``k + 1`` printed in place: a ``const k = k + 1`` read
    itself (undefined, and the addresses after it read the shadow: a crash on the host)."""
    text = """param M = 2
out W: f32[3 * M, M, M + 6]
par M i {
  par M j {
    seq M + 3 k {
      if k % 2 == 0 { W[3 * i, j, k + 3] = k } else { W[3 * i, j, k + 3] = -k }
    }
  }
}"""
    program = parse(text, name="shifted").bind_defaults()
    want = np.zeros((6, 2, 8), np.float32)
    for i in range(2):
        for j in range(2):
            for k in range(5):
                want[3 * i, j, k + 3] = k if k % 2 == 0 else -k
    np.testing.assert_array_equal(reference(program)["W"], want)
    # a thread per point: with a warp (the loop on the lanes) isl generates no shifted leaf
    kernel = polymap.compile(program, pins={"i": {"lanes": 1}})
    np.testing.assert_array_equal(kernel.run_host()["W"], want)
    assert "const long long k = " not in kernel.source and "const int k = " not in kernel.source
