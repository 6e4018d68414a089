"""``min(a, b)`` and ``max(a, b)`` of index expressions (issue 13) in loop extents, shapes
and conditions: piecewise affine, which isl takes as it is. Expected values are NumPy loops
written here; the reference, the scalar oracle and the emitted code on the host are each
held to them, and NVRTC compiles the code."""

from __future__ import annotations

import numpy as np
import pytest
from everywhere import run_everywhere

import polymap
from polymap.errors import ArgumentError, ArityError, NotAffineError
from polymap.ir.parse import parse
from polymap.reference import reference

BANDED = """param N = 37
param W = 5
in  A: f32[N, N]
in  x: f32[N]
out y: f32[N]
par N i {
  seq min(N - i, W) k {
    y[i] += A[i, i + k] * x[i + k]
  }
}
"""

WINDOW = """param N = 45
in  X: f32[N, N]
out Y: f32[N, N]
par N i {
  par min(i + 1, 9) d {
    Y[i, i - d] = X[i, i - d] * 2
  }
}
"""


def _everywhere(program, inputs: dict, want: dict) -> None:
    runs, _ = run_everywhere(program, inputs)
    got = runs["reference"]
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(runs["oracle"][name], got[name])
        np.testing.assert_allclose(runs["host"][name], got[name], rtol=1e-5, atol=1e-6)


def test_a_banded_product_stops_at_the_matrix_edge():
    program = parse(BANDED, name="banded").bind_defaults()
    rng = np.random.default_rng(0)
    a, x = rng.standard_normal((37, 37)).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    want = np.zeros(37)
    for i in range(37):
        for k in range(min(37 - i, 5)):
            want[i] += a[i, i + k] * x[i + k]
    _everywhere(program, {"A": a, "x": x}, {"y": want})


def test_a_par_loop_with_a_min_extent_is_mapped_onto_threads():
    program = parse(WINDOW, name="window").bind_defaults()
    x = np.random.default_rng(1).standard_normal((45, 45)).astype(np.float32)
    want = np.zeros((45, 45))
    for i in range(45):
        for d in range(min(i + 1, 9)):
            want[i, i - d] = 2 * x[i, i - d]
    _everywhere(program, {"X": x}, {"Y": want})
    (loop_i, loop_d) = polymap.optimize(program).kernels[0].loops
    assert loop_d.max_extent == 9  # the largest extent over the domain, from isl


def test_one_symbolic_kernel_runs_at_any_size_on_either_side_of_the_band_width():
    rng = np.random.default_rng(2)
    for w in (1, 3):
        # N symbolic (the shapes give it at run time), W bound: min(N - i, W) picks either side
        kernel = polymap.compile(parse(BANDED.replace(" = 37", ""), name="banded").bind(W=w))
        for n in (1, 2, 9, 33):
            a, x = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            want = [sum(float(a[i, i + k]) * float(x[i + k]) for k in range(min(n - i, w))) for i in range(n)]
            np.testing.assert_allclose(kernel.run_host(A=a, x=x)["y"], want, rtol=1e-5, atol=1e-6)


def test_max_in_a_shape_and_in_an_if():
    text = """param N = 6
in  x: f32[max(N, 8)]
out y: f32[max(N, 8)]
par max(N, 8) i {
  if i < max(N - 4, 3) {
    y[i] = x[i] + 1
  }
}
"""
    program = parse(text, name="shape").bind_defaults()
    x = np.arange(8, dtype=np.float32)
    want = np.where(np.arange(8) < 3, x + 1, 0)  # max(6 - 4, 3) = 3; the shape is max(6, 8) = 8
    _everywhere(program, {"x": x}, {"y": want})


def test_min_and_max_print_as_calls_and_read_back():
    program = parse(BANDED, name="banded")
    assert "seq min(N - i, W) k {" in str(program)
    assert str(parse(str(program), name="banded")) == str(program)


@pytest.mark.parametrize(
    "body, error, message",
    [
        (
            "y[min(i, 3)] = x[i]",
            NotAffineError,
            r"4:13: min\(\) in an index: min and max may appear in loop extents",
        ),
        ("y[i] = x[max(i - 1, 0)]", NotAffineError, r"4:20: max\(\) in an index"),
        (
            "seq min(N, i, 3) k { y[i] += x[k] }",
            ArityError,
            r"min\(\) in the extent of loop 'k' takes 2 arguments, got 3",
        ),
    ],
)
def test_min_in_an_access_or_with_three_arguments_is_a_located_error(body, error, message):
    text = f"param N = 8\nin x: f32[N]\nout y: f32[N]\npar N i {{ {body} }}"
    with pytest.raises(error, match=message):
        parse(text, source="t.te")


def test_a_size_that_no_shape_gives_is_passed_as_an_argument():
    """W appears in no buffer's shape: one kernel with N and W symbolic takes W=... next to
    its arrays (the reference too), and runs either side of min(N - i, W)."""
    program = parse(BANDED.replace(" = 37", "").replace(" = 5", ""), name="banded")
    kernel = polymap.compile(program)
    rng = np.random.default_rng(3)
    for n, w in ((9, 3), (4, 40), (1, 1)):
        a, x = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        want = [sum(float(a[i, i + k]) * float(x[i + k]) for k in range(min(n - i, w))) for i in range(n)]
        np.testing.assert_allclose(kernel.run_host(A=a, x=x, W=w)["y"], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(reference(program, A=a, x=x, W=w)["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"W": 3, "N": 8},
            r"conflicting values for size N: 8 from the argument N=8, 9 from dimension 0 of 'A'",
        ),
        ({"W": "3"}, r"size W of program 'banded' takes an integer, got str"),
        ({"W": True}, r"size W of program 'banded' takes an integer, got bool"),
        ({"W": -1}, r"size W of program 'banded' is -1: a size is not negative"),
        ({}, r"size W of program 'banded' is unbound: .* give it \(W=...\)"),
        ({"W": 3, "Q": 1}, r"'Q' is not an input of program 'banded' \(inputs: A, x; sizes: N, W\)"),
    ],
)
def test_a_size_argument_is_checked(extra, message):
    program = parse(BANDED.replace(" = 37", "").replace(" = 5", ""), name="banded")
    a, x = np.ones((9, 9), np.float32), np.ones(9, np.float32)
    with pytest.raises(ArgumentError, match=message):
        polymap.compile(program).run_host(A=a, x=x, **extra)
