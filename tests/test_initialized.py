"""Reads of temporaries that nothing wrote (``poly.checks.check_initialized``): refused with
an UninitializedReadError naming the statement, the buffer, the line:col and an instance;
programs that read only what they wrote, under selects, data conditions and gathers
included, pass."""

from __future__ import annotations

import numpy as np
import pytest

import polymap
from polymap.errors import PolymapError, UninitializedReadError
from polymap.ir.parse import parse
from polymap.poly.model import analyze

FRESH_EACH_STEP = """param M, N, T
in  X: f32[M, N]
out Y: f32[M, T]
par M i {
  seq T t {
    new s: f32
    seq N j {
      s += X[i, j]
    }
    Y[i, t] = s
  }
}
"""


def _check(text: str, context: str | None = None):
    return analyze(parse(text, name="p"), context=context)


def test_an_accumulator_never_set_is_refused_with_its_statement_place_and_an_instance():
    with pytest.raises(UninitializedReadError) as caught:
        _check(FRESH_EACH_STEP)
    message = str(caught.value)
    assert "S0 `s += X[i, j]` reads s before anything writes it" in message
    assert "s is a temporary (`new`), whose elements start undefined" in message
    assert "with M = 1, N = 1, T = 1, at i = 0, t = 0, j = 0: it reads s" in message
    assert "(an update: give s its start, 0, before the loops that update it)" in message
    assert ":8:7" in message  # the update's line:col
    assert isinstance(caught.value, PolymapError)


def test_the_element_left_unwritten_of_an_array_is_named():
    text = """param M, N
in  X: f32[M, N]
out Y: f32[M, N]
par M i {
  new t: f32[N]
  par N - 1 j {
    t[j] = X[i, j]
  }
  par N j {
    Y[i, j] = t[j] * 2
  }
}
"""
    with pytest.raises(
        UninitializedReadError, match=r"e\.g\. with M = 1, N = 1, at i = 0, j = 0: it reads t\[0\]"
    ):
        _check(text)


def test_a_program_wide_temporary_read_before_its_loop_writes_it_is_refused():
    text = """param N
in  X: f32[N]
out Y: f32[N]
new T: f32[N]
par N i { Y[i] = T[i] + 1 }
par N i { T[i] = X[i] }
"""
    with pytest.raises(UninitializedReadError, match="S0 `Y\\[i\\] = T\\[i\\] \\+ 1` reads T\\[i\\]"):
        _check(text)


def test_a_read_after_a_loop_is_refused_where_the_loop_may_not_run():
    text = """param N
in  X: f32[N]
out Y: f32
new t: f32
seq N - 1 j { t = X[j] }
Y = t
"""
    with pytest.raises(UninitializedReadError, match="with N = 1: it reads t"):
        _check(text)  # sizes are at least 1: at N = 1 the loop has no iteration
    _check(text, "N >= 2")


def test_reads_that_only_what_was_written_can_feed_pass():
    # a select's other branch (the running max's first step), a write under a data
    # condition (it may have filled the element), a gathered read, a reset accumulator
    text = """param M, N
in  X: f32[M, N]
in  I: i32[M]
out Y: f32[M]
out Z: f32[M]
out W: f32[M]
par M i {
  new m: f32
  new p: f32
  new row: f32[N]
  seq N k {
    m = select(k == 0, X[i, 0], max(m, X[i, k]))
  }
  Y[i] = m
  if X[i, 0] > 0 {
    p = X[i, 0]
  }
  Z[i] = select(X[i, 0] > 0, p, 0)
  par N k {
    row[k] = X[i, k] * 2
  }
  W[i] = row[I[i]]
}
"""
    program = parse(text, name="fine").bind(M=5, N=6)
    kernel = polymap.compile(program)
    x = np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32)
    index = np.array([0, 5, 2, 3, 1], np.int32)
    got = kernel.run_host(X=x, I=index)
    np.testing.assert_array_equal(got["Y"], x.max(axis=1))
    np.testing.assert_array_equal(got["Z"], np.where(x[:, 0] > 0, x[:, 0], 0))
    np.testing.assert_array_equal(got["W"], x[np.arange(5), index] * 2)


@pytest.mark.parametrize(
    ("body", "what"),
    [
        # a scatter into a histogram nothing zeroed: none of the elements it may touch written
        (
            "par N i { atomic T[P[i]] += 1 }\npar N i { Y[i] = f32(T[i]) }",
            r"reads T\[P\[i\]\] before .* start, 0,",
        ),
        # a gathered read of a temporary nothing writes
        ("par N i { Y[i] = f32(T[P[i]]) }", r"reads T\[P\[i\]\] before"),
        # a data condition is evaluated whenever its statement is reached
        ("par N i { if f32(T[i]) > 0 { Y[i] = 1 } }", r"reads T\[i\] before"),
        # the same element in both branches of a select: read either way
        ("par N i { Y[i] = select(X[i] > 0, f32(T[i]), f32(T[i])) }", r"reads T\[i\] before"),
    ],
    ids=["scatter", "gather", "data-if", "both-branches"],
)
def test_reads_that_surely_find_nothing_written_are_refused(body, what):
    text = f"param N\nin X: f32[N]\nin P: i32[N]\nout Y: f32[N]\nnew T: i32[N]\n{body}\n"
    with pytest.raises(UninitializedReadError, match=what):
        _check(text)


def test_a_max_with_no_start_is_told_its_start():
    text = "param M, N\nin X: f32[M, N]\nout Y: f32[M]\npar M i {\n  new s: f32\n  seq N j { s max= X[i, j] }\n  Y[i] = s\n}\n"
    with pytest.raises(
        UninitializedReadError, match=r"give s its start, -inf, before the loops that update it"
    ):
        _check(text)


def test_short_circuits_and_anchors_read_nothing_that_counts():
    # (from a review) at k = 0 the or is decided by its left side: m is not read; an
    # anchor discards its value
    text = """param M, N
in  X: f32[M, N]
out Y: f32[M]
par M i {
  new m: f32
  new t: f32
  anchor t
  seq N k {
    m = select(k == 0 or X[i, k] > m, X[i, k], m)
  }
  Y[i] = m
}
"""
    program = parse(text, name="short").bind(M=4, N=6)
    x = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(polymap.compile(program).run_host(X=x)["Y"], x.max(axis=1))


def test_a_promoted_register_of_a_temporary_nothing_wrote_starts_without_a_load():
    # (from a review) register promotion loads m[i] before the loop; m is written by the loop
    # before any use, so the load would read nothing written: the register starts undefined
    text = """param M = 64, K = 32
in  X: f32[M, K]
out Y: f32[M]
new m: f32[M]
par M i {
  seq K k {
    m[i] = select(k == 0, X[i, 0], max(m[i], X[i, k]))
  }
}
par M i { Y[i] = m[i] * 2 }
"""
    program = parse(text, name="promoted").bind_defaults()
    kernel = polymap.compile(program)
    body = str(kernel.mapping.program)
    # (X[i, 0], the same element in every iteration of k, is loaded once before the loop)
    assert "X_held = X[i, 0]" in body
    assert "m_acc = select(k == 0, X_held, max(m_acc, X[i, k]))" in body and "m_acc = m[i]" not in body
    x = np.random.default_rng(6).standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_array_equal(kernel.run_host(X=x)["Y"], x.max(axis=1) * 2)


def test_the_command_line_says_it_without_a_traceback(tmp_path, capsys):
    from polymap.cli import main

    path = tmp_path / "fresh.te"
    path.write_text(FRESH_EACH_STEP)
    assert main(["check", str(path)]) != 0
    err = capsys.readouterr().err
    assert "reads s before anything writes it" in err and "Traceback" not in err
