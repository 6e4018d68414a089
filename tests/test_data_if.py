"""``if cond { .. }`` whose condition reads data (issue 13): each statement inside is
predicated. Every instance of its domain evaluates the condition (its reads are the
statement's, in bounds and ordered by dependences), only those where it holds store (a
may-write: races and dependences take the whole write), the emitted code wraps the statement
in ``if``, and the reference, the test oracle and the host run agree. Expected values here
are computed with NumPy, apart from the code under test."""

from __future__ import annotations

import re

import numpy as np
import pytest
from everywhere import run_everywhere

import polymap
from polymap.errors import BoundsError, ProgramError, RaceError
from polymap.ir.parse import parse
from polymap.reference import reference


def _everywhere(text: str, inputs: dict, want: dict, **tolerance):
    runs, kernel = run_everywhere(parse(text, name="p").bind_defaults(), inputs)
    for who, got in runs.items():
        for name, expected in want.items():
            if tolerance:
                np.testing.assert_allclose(got[name], expected, err_msg=f"{who}: {name}", **tolerance)
            else:
                np.testing.assert_array_equal(got[name], expected, err_msg=f"{who}: {name}")
    return kernel


def test_a_count_under_a_float_condition_stays_an_exact_integer_update():
    """The condition's reads do not enter the statement's type: ``n[i] += 1`` computes in
    i32, so a count past 2^24 is exact (as a select would not be: its condition's f32 read
    makes the statement compute in f32)."""
    text = "param N = 300\nin x: f32[N]\ninout n: i32[N]\npar N i { if x[i] > 0.5 { n[i] += 1 } }"
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300).astype(np.float32)
    n = np.full(300, 16777217, np.int32)
    kernel = _everywhere(text, {"x": x, "n": n}, {"n": n + (x > 0.5)})
    body = kernel.source[kernel.source.index("__global__") :]
    assert "if (x[" in body and "] > 0.5f) { n[" in body and "] += 1; }" in body


def test_the_affine_conjuncts_stay_a_guard_and_the_else_runs_on_both_parts_of_its_domain():
    """``i >= 1 and x[i - 1] > 0``: the affine conjunct restricts the domain, so the data
    conjunct's read x[i - 1] is in bounds; the else-branch runs where i < 1 and where i >= 1
    and the data conjunct fails, as two statements."""
    text = (
        "param N = 257\nin x: f32[N]\nout y: f32[N]\n"
        "par N i { if i >= 1 and x[i - 1] > 0 { y[i] = x[i - 1] } else { y[i] = 7 } }"
    )
    program = parse(text)
    assert str(parse(str(program))) == str(program)  # prints back as ifs
    x = np.random.default_rng(1).standard_normal(257).astype(np.float32)
    shifted = np.concatenate([[np.float32(-1)], x[:-1]])
    want = np.where((np.arange(257) >= 1) & (shifted > 0), shifted, np.float32(7))
    _everywhere(text, {"x": x}, {"y": want})


def test_a_single_statement_may_write_what_its_condition_reads():
    """In-place ReLU: the one statement reads its condition before it writes."""
    text = "param N = 100\ninout x: f32[N]\npar N i { if x[i] < 0 { x[i] = 0 } }"
    x = np.random.default_rng(2).standard_normal(100).astype(np.float32)
    _everywhere(text, {"x": x}, {"x": np.where(x < 0, np.float32(0), x)})


def test_an_integer_division_under_its_condition_divides_only_where_it_holds():
    text = "param N = 64\nin a: i32[N]\nin d: i32[N]\nout q: i32[N]\npar N i { if d[i] != 0 { q[i] = a[i] / d[i] } }"
    rng = np.random.default_rng(3)
    a, d = rng.integers(-100, 100, 64).astype(np.int32), rng.integers(-2, 3, 64).astype(np.int32)
    safe = np.where(d == 0, 1, d)
    quotient = (np.sign(a) * np.sign(safe) * (np.abs(a) // np.abs(safe))).astype(np.int32)  # C truncates
    _everywhere(text, {"a": a, "d": d}, {"q": np.where(d != 0, quotient, 0).astype(np.int32)})


def test_a_conditional_sum_is_still_an_accumulator_spread_over_lanes():
    text = "param M = 64\nparam N = 300\nin A: f32[M, N]\nout s: f32[M]\npar M i { seq N j { if A[i, j] > 0 { s[i] += A[i, j] } } }"
    a = np.random.default_rng(4).standard_normal((64, 300)).astype(np.float32)
    kernel = _everywhere(text, {"A": a}, {"s": np.where(a > 0, a, 0).sum(1)}, rtol=1e-5, atol=1e-5)
    assert kernel.mapping.kernels[0].lanes >= 32  # 64 rows: a block of warps each


def test_a_condition_that_reads_the_accumulator_keeps_the_sum_in_order():
    """``if s[i] < 10 { s[i] += x[j] }`` stops adding once 10 is passed: the accumulator is
    read by the condition, so it is no reduction to spread, and register promotion reads
    the register in the condition too."""
    text = "param M = 8\nparam N = 100\nin x: f32[N]\nout s: f32[M]\npar M i { seq N j { if s[i] < 10 { s[i] += x[j] } } }"
    x = np.abs(np.random.default_rng(5).standard_normal(100)).astype(np.float32)
    total = np.float32(0)
    for v in x:
        if total < 10:
            total = np.float32(total + v)
    kernel = _everywhere(text, {"x": x}, {"s": np.full(8, total)})
    assert kernel.mapping.kernels[0].lanes == 1


def test_argmax_through_a_local_condition():
    """The condition computed once into a local, then two statements under it (the pattern
    the error below suggests)."""
    text = """param M = 20
param N = 37
in X: f32[M, N]
out at: i32[M]
par M i {
  new m: f32
  new k: i32
  new c: i32
  m = -inf
  k = 0
  seq N j {
    c = select(X[i, j] > m, 1, 0)
    if c == 1 {
      m = X[i, j]
      k = j
    }
  }
  at[i] = k
}"""
    x = np.random.default_rng(6).standard_normal((20, 37)).astype(np.float32)
    _everywhere(text, {"X": x}, {"at": x.argmax(1).astype(np.int32)})


def test_a_predicated_write_is_a_may_write_for_the_race_proof():
    text = "param N = 40\nin x: f32[N]\nout y: f32[4]\npar N i { if x[i] > 0 { y[0] = x[i] } }"
    with pytest.raises(RaceError, match=r"may write y\[0\] in two different iterations of 'i'"):
        polymap.compile(parse(text))


def test_the_conditions_reads_are_bounds_checked_on_the_whole_domain():
    text = "param N = 40\nin x: f32[N]\nout y: f32[N]\npar N i { if x[i + 1] > 0 { y[i] = 1 } }"
    with pytest.raises(BoundsError, match=r"reads x\[i \+ 1\] outside the declared shape"):
        polymap.analyze(parse(text))


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "if x[i] > 0 {\n x[i] = 1\n y[i] = 2\n }",
            r"6:2: statement `x\[i\] = 1` writes 'x', which the condition of its if reads: .*\(new c: i32",
        ),
        ("if x[i] > 0 { y[i] = 1 } else { x[i] = 2 }", r"5:43: statement `x\[i\] = 2` writes 'x'"),
        ("if x[i] > 0 { new t: f32\n t = 1 }", r"5:25: 'new t' inside an if: declare it before"),
        # one loop is no single statement: it would evaluate the condition at each iteration
        ("if x[0] > 0 { seq N j { x[j] = -1 } }", r"5:35: statement `x\[j\] = -1` writes 'x'"),
    ],
)
def test_a_data_if_that_would_change_its_own_condition_is_an_error(body, message):
    text = f"param N = 4\ninout x: f32[N]\nout y: f32[N]\npar N i {{\n{' ' * 10}{body}\n}}"
    with pytest.raises(ProgramError, match=message):
        parse(text, source="t.te")


def test_a_condition_on_a_staged_buffer_reads_the_shared_tile():
    """``if A[i, k] > 0`` in a GEMM whose A is staged: the condition's read is an access of
    the statement like the product's, so both read the tile in shared memory."""
    text = """param M = 96
param N = 80
param K = 72
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { seq K k { if A[i, k] > 0 { C[i, j] += A[i, k] * B[k, j] } } } }"""
    program = parse(text, name="relu_gemm")
    pins = {
        "i": {"thread": "y", "threads": 8, "seq": 2},
        "j": {"thread": "x", "threads": 32, "seq": 2},
        "k": {"tile": 16, "stage": ["A", "B"]},
    }
    mapping = polymap.optimize(program, pins=pins)
    kernel = polymap.compile(mapping.program, mapping)
    assert re.search(r"if \(A_sh\[[^\n]*\] > 0\.0f\) \{ C_acc\[[^\n]*\+= A_sh\[", kernel.source)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((96, 72)).astype(np.float32)
    b = rng.standard_normal((72, 80)).astype(np.float32)
    got = kernel.run_host(A=a, B=b)["C"]
    np.testing.assert_allclose(got, np.where(a > 0, a, 0) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, reference(program, A=a, B=b)["C"], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------- found by a review that attacked it


def test_a_loop_index_and_a_literal_in_the_condition_take_the_conditions_own_types():
    """``a[i] > i`` prints the index ``i`` (the statement's value does not use it), and
    ``k[i] == 16777217`` compares in i32, the type of the buffer the condition reads, not in
    the f32 of the statement's store (16777217 is no f32); an i64 literal is no i32 error."""
    text = (
        "param N = 4\nin a: i32[N]\nin k: i32[N]\nin w: i64[N]\nout y: i32[N]\nout z: f32[N]\nout u: i32[N]\n"
        "par N i {\n  if a[i] > i { y[i] = 1 }\n  if k[i] == 16777217 { z[i] = 1 }\n  if w[i] > 3000000000 { u[i] = 1 }\n}"
    )
    a = np.array([0, 2, 1, 5], np.int32)
    k = np.array([16777216, 16777217, 5, 16777218], np.int32)
    w = np.array([0, 3000000001, 5, 2**40], np.int64)
    want = {
        "y": (a > np.arange(4)).astype(np.int32),
        "z": (k == 16777217).astype(np.float32),
        "u": (w > 3000000000).astype(np.int32),
    }
    _everywhere(text, {"a": a, "k": k, "w": w}, want)


def test_an_else_if_chain_on_mixed_conditions_grows_linearly():
    """Each arm ``if i >= k and x[i] > k``: the else-branch of an arm that holds another if
    on data is predicated whole (split at every level, the statements doubled per arm:
    2047 for 10 arms)."""
    arms, body = 10, "y[i] = 0"
    for k in range(arms, 0, -1):
        body = f"if i >= {k} and x[i] > {k} {{ y[i] = {k} }} else {{ {body} }}"
    text = f"param N = 64\nin x: f32[N]\nout y: f32[N]\npar N i {{ {body} }}"
    assert str(parse(text)).count("y[i] =") == arms + 2
    x = np.random.default_rng(8).uniform(0, 12, 64).astype(np.float32)
    want = np.zeros(64, np.float32)
    for i in range(64):
        want[i] = next((k for k in range(1, arms + 1) if i >= k and x[i] > k), 0)
    _everywhere(text, {"x": x}, {"y": want})
