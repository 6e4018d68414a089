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
    assert "with M = 1, N = 1, T = 1: i = 0, t = 0, j = 0 it reads s" in message
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
        UninitializedReadError, match=r"e\.g\. with M = 1, N = 1: i = 0, j = 0 it reads t\[0\]"
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


def test_the_command_line_says_it_without_a_traceback(tmp_path, capsys):
    from polymap.cli import main

    path = tmp_path / "fresh.te"
    path.write_text(FRESH_EACH_STEP)
    assert main(["check", str(path)]) != 0
    err = capsys.readouterr().err
    assert "reads s before anything writes it" in err and "Traceback" not in err
