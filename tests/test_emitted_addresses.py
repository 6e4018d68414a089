"""The emitted text is what the proof is about: addresses built by isl from the proved
relations (issue 9), integer arithmetic wide enough for every size it accepts, and user
text that can never escape a comment (issue 14, items 1, 2 and 4)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polymap
from polymap.codegen.comments import comment, comment_text
from polymap.ir.nodes import IBin, IConst, IndexOp, IVar
from polymap.runtime.nvrtc import compile_ptx
from polymap.schedule.ranges import Interval, index_interval


def _inputs(program, seed=0, **sizes):
    rng = np.random.default_rng(seed)
    bound = program.bind(**sizes) if sizes else program
    out = {}
    for decl in bound.buffers:
        if decl.kind.value != "in":
            continue
        shape = [int(str(e)) for e in decl.shape]
        if decl.dtype.value == "i32":
            out[decl.name] = rng.integers(-50, 50, size=shape).astype(np.int32)
        else:
            out[decl.name] = rng.standard_normal(shape).astype(decl.dtype.numpy)
    return bound, out


def _run_and_compare(program, **sizes):
    kernel = polymap.compile(program)
    bound, inputs = _inputs(program, **sizes)
    expected = polymap.reference(bound, **inputs)
    actual = kernel.run_host(**inputs)
    for name, want in expected.items():
        np.testing.assert_allclose(actual[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
    return kernel


# -- item 1: a staged copy's address with a compound row extent


STAGED_COMPOUND = """
param M, N, K
in  A: f32[M, K + 1]
in  B: f32[K, N]
out C: f32[M, N]
par M i {
  par N j {
    C[i, j] = 0
    seq K k { C[i, j] += A[i, k] * B[k, j] }
  }
}
"""


def test_a_staged_copy_of_a_buffer_with_a_compound_row_extent_reads_the_right_rows():
    program = polymap.parse(STAGED_COMPOUND, name="compound")
    kernel = _run_and_compare(program, M=64, N=64, K=32)
    staged = {b for km in kernel.mapping.kernels if km.staging for b in km.staging.buffers}
    assert "A" in staged, "the test needs A staged over k to exercise the copy's address"
    # the row extent is a sum: it must be multiplied as a whole
    assert re.search(r"\* \((\(long long\))?K \+ 1(LL)?\)", kernel.source), kernel.source


def test_a_conv_like_output_extent_staged_over_the_reduction_is_right():
    program = polymap.parse(
        """
        param H, K
        in  X: f32[H - K + 1, K]
        in  W: f32[K, H]
        out Y: f32[H - K + 1, H]
        par H - K + 1 i { par H j { Y[i, j] = 0
          seq K k { Y[i, j] += X[i, k] * W[k, j] } } }
        """,
        name="conv_like",
    )
    _run_and_compare(program, H=70, K=24)


# -- item 2: 32-bit overflow inside index expressions


def test_an_index_whose_intermediate_value_overflows_int_is_computed_in_64_bits():
    program = polymap.parse(
        "param N = 4096\nin x: f32[7]\nout y: f32[N]\npar N i { y[i] = x[(i * 1000000) % 7] }", name="wrap"
    )
    kernel = _run_and_compare(program)
    assert "(long long)" in kernel.source


def test_a_write_through_an_overflowing_quotient_stays_in_bounds():
    # isl proves s[(i * 1048576) / 1048576] == s[i]; in int arithmetic the product wraps for
    # i >= 2048 and the store lands before s (the process died of heap corruption)
    program = polymap.parse(
        "param N\nin x: f32[N]\nout s: f32[N]\nseq N i { s[(i * 1048576) / 1048576] = x[i] }", name="quot"
    )
    _run_and_compare(program, N=5000)


def test_buffers_of_more_than_2_to_the_31_elements_are_indexed_in_64_bits():
    program = polymap.parse(
        "param M = 70000, N = 70000\nin A: f32[M, N]\nout C: f32[M, N]\n"
        "par M i { par N j { C[i, j] = A[i, j] * 2 } }",
        name="huge",
    )
    kernel = polymap.compile(program)
    body = kernel.source[kernel.source.index("__global__") :]
    assert re.search(r"C\[\(long long\)", body), body
    assert ".target sm_90" in compile_ptx(kernel.source)


def test_a_context_that_bounds_the_sizes_keeps_index_arithmetic_in_32_bits():
    program = polymap.load("models/matmul_256x256x32.te")
    narrow = polymap.compile(program, context="M <= 4096 and N <= 4096 and K <= 4096")
    wide = polymap.compile(program)
    kernel_text = narrow.source[
        narrow.source.index("__global__") : narrow.source.index("#ifndef __CUDACC_RTC__")
    ]
    assert "long long" not in kernel_text
    assert "long long" in wide.source[wide.source.index("__global__") :]
    a = np.random.default_rng(1).standard_normal((40, 24)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((24, 33)).astype(np.float32)
    for kernel in (narrow, wide):
        np.testing.assert_allclose(kernel.run_host(A=a, B=b)["C"], a @ b, rtol=1e-4, atol=1e-4)


def test_loop_iterators_that_may_leave_int_are_declared_long_long():
    # i < 2 N <= 2^32 - 2: the serial loop's counter needs 64 bits, the size N does not
    program = polymap.parse(
        "param N\nin x: f32[N, 2]\nout s: f32\nseq 2 * N i { s += x[i / 2, i % 2] }", name="long_loop"
    )
    kernel = polymap.compile(program, pins={"i": {"split": 1}})  # the serial loop itself, not split
    body = kernel.source[kernel.source.index("__global__") :]
    assert re.search(r"for \(long long i = 0;", body), body
    assert ".target sm_90" in compile_ptx(kernel.source)
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    assert kernel.run_host(x=x)["s"] == pytest.approx(45.0)


def test_interval_arithmetic_of_index_expressions():
    i, n = IVar("i"), IVar("N")
    ranges = {"i": Interval(0, 4095), "N": Interval(1, 2**31 - 1)}
    big = IBin(IndexOp.MUL, i, IConst(1000000))
    assert index_interval(big, ranges) == Interval(0, 4095000000)
    assert not index_interval(big, ranges).fits32
    assert index_interval(IBin(IndexOp.MOD, big, IConst(7)), ranges) == Interval(0, 6)
    assert index_interval(
        IBin(IndexOp.FLOORDIV, IBin(IndexOp.SUB, i, IConst(5)), IConst(2)), ranges
    ) == Interval(-3, 2045)
    assert index_interval(IBin(IndexOp.ADD, n, IConst(1)), ranges).hi == 2**31


# -- item 4: user text in comments


def test_comment_text_never_ends_the_comment():
    hostile = 'a\nstatic int x = system("id");\r\u2028\\\n??/\n*/ // x'
    text = comment(hostile)
    assert "\n" not in text and "\r" not in text and "\\" not in text and "??" not in text
    assert text.startswith("// ")
    assert comment_text("plain name_1: C[i, j] += 2") == "plain name_1: C[i, j] += 2"


def test_a_file_name_with_a_newline_cannot_inject_code(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the injected command would create the marker here
    marker = tmp_path / "pwned"
    path = tmp_path / 'evil\nstatic int pwned = system("touch pwned");\n#.te'
    path.write_text("param N = 8\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i] }\n")
    kernel = polymap.compile(polymap.load(path))
    assert not any(line.lstrip().startswith("static int pwned") for line in kernel.source.splitlines())
    out = kernel.run_host(x=np.arange(8, dtype=np.float32))
    assert np.array_equal(out["y"], np.arange(8, dtype=np.float32))
    assert not marker.exists()


def test_a_multi_line_context_compiles_and_runs():
    program = polymap.parse("param N\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i] * 3 }", name="ctx")
    kernel = polymap.compile(program, context="N >= 1\n and N <= 100000")
    x = np.arange(50, dtype=np.float32)
    assert np.array_equal(kernel.run_host(x=x)["y"], x * 3)
    lines = kernel.source.splitlines()
    assert any(line.startswith("// sizes as arguments") and "N <= 100000" in line for line in lines)


def test_a_program_run_from_a_hostile_path_through_the_cli_runs_nothing(tmp_path: Path):
    marker = tmp_path / "cli_pwned"
    path = tmp_path / 'x\nstatic int pwned = system("touch cli_pwned");\n#.te'
    path.write_text("param N = 8\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i] }\n")
    done = subprocess.run(
        [sys.executable, "-m", "polymap.cli", "run", str(path), "--host"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("model", ["matmul_256x256x32", "transpose", "batched_matmul"])
def test_every_address_in_a_kernel_comes_from_isl(model):
    """No address is printed from the IR any more: a kernel's accesses are isl expressions,
    which never contain the IR's ``%`` or ``//`` of a tile index (the old hand-printed
    shared-memory reads were ``X_sh[i % 32]``)."""
    kernel = polymap.compile(polymap.load(f"models/{model}.te"))
    for line in kernel.source.splitlines():
        # a copy's store index is isl's too, and may take a thread index modulo the tile's
        # width (``A_sh[tx % 16][..]`` in a transposed tile): only the reads are looked at
        if "_sh[" in line and "=" in line and "__shared__" not in line and "// copy of" not in line:
            # a double buffer's slot is the tile loop's iterator mod 2, isl's expression too
            # (``schedule.kernel._slot_of_tile_step``): the indices after it are looked at
            line = line.replace("_sh[kt % 2]", "_sh")
            assert not re.search(r"_sh\[[^\]]*\b[a-z]\w* % \d+\]", line), line


# -- the interval arithmetic is sound: every value lies in its interval


@st.composite
def _index_exprs(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(
            st.one_of(
                st.sampled_from([IVar("i"), IVar("j")]), st.builds(IConst, st.integers(-(10**6), 10**6))
            )
        )
    op = draw(st.sampled_from(list(IndexOp)))
    lhs = draw(_index_exprs(depth + 1))
    if op in (IndexOp.FLOORDIV, IndexOp.MOD):
        return IBin(op, lhs, IConst(draw(st.integers(1, 10**4))))
    if op is IndexOp.MUL:
        return IBin(op, lhs, IConst(draw(st.integers(-(10**5), 10**5))))
    return IBin(op, lhs, draw(_index_exprs(depth + 1)))


def _evaluate(e, env):
    if isinstance(e, IConst):
        return e.value
    if isinstance(e, IVar):
        return env[e.name]
    a, b = _evaluate(e.lhs, env), _evaluate(e.rhs, env)
    return {
        IndexOp.ADD: lambda: a + b,
        IndexOp.SUB: lambda: a - b,
        IndexOp.MUL: lambda: a * b,
        IndexOp.FLOORDIV: lambda: a // b,
        IndexOp.MOD: lambda: a % b,
        IndexOp.MIN: lambda: min(a, b),
        IndexOp.MAX: lambda: max(a, b),
    }[e.op]()


@settings(max_examples=300, deadline=None)
@given(_index_exprs(), st.integers(-(10**9), 10**9), st.integers(0, 10**9), st.integers(0, 10**9))
def test_every_value_of_an_index_expression_lies_in_its_interval(expr, lo, span, pick):
    hi = lo + span
    ranges = {"i": Interval(lo, hi), "j": Interval(-5, 5)}
    for i in (lo, hi, lo + pick % (span + 1)):
        for j in (-5, 0, 5):
            value = _evaluate(expr, {"i": i, "j": j})
            interval = index_interval(expr, ranges)
            assert interval.lo <= value <= interval.hi, (str(expr), i, j, interval)
