"""Code generation: every emitted kernel compiles with NVRTC for sm_90, runs on the host
(the same source through the host C++ compiler) and equals the NumPy reference.

The reference executor is the ground truth; expected values never come from the emitted
code. Golden files pin the emitted text of a few kernels: regenerate them with
``POLYMAP_REGEN_GOLDEN=1 python -m pytest tests/test_codegen.py`` after a deliberate change.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import polymap
from polymap.codegen.cuda import EDGE_BLOCK_NOTE, emit_cuda
from polymap.errors import (
    ArgumentError,
    CodegenError,
    CudaCompileError,
    NotAffineError,
    VerificationError,
)
from polymap.ir.parse import load, parse
from polymap.mapping.outcome import Outcome
from polymap.mapping.space import Axis, Distribution, KernelMapping, LoopMapping
from polymap.reference import execute, reference
from polymap.runtime.host import run_host
from polymap.runtime.nvrtc import compile_ptx

sys.path.insert(0, str(Path(__file__).parent))
from test_models import NUMERIC, random_inputs
from test_reference import random_programs, random_statements

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"


def assert_matches(got: dict, want: dict, program) -> None:
    """Floats within a few ulps of accumulated rounding (of the type: two units for the
    16-bit floats), integers and bool exactly."""
    assert set(got) == set(want)
    for name, expected in want.items():
        actual = np.asarray(got[name])
        expected = np.asarray(expected)
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, name
        if expected.dtype.kind in "iub":
            np.testing.assert_array_equal(actual, expected, err_msg=name)
        else:
            actual, expected = actual.astype(np.float64), expected.astype(np.float64)
            finite = np.isfinite(expected)
            scale = max(1.0, float(np.abs(expected[finite]).max())) if finite.any() else 1.0
            rtol = {"float16": 2.0**-9, "bfloat16": 2.0**-6}.get(np.asarray(got[name]).dtype.name, 1e-4)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * 0.1 * scale, err_msg=name)


def compile_model(name: str):
    """The model compiled with its sizes symbolic (bound to the defaults only where flat
    indices need them), and the small sizes its numeric check uses."""
    sizes, _ = NUMERIC[name]
    program = load(ROOT / "models" / f"{name}.te")
    try:
        kernel = polymap.compile(program)
    except NotAffineError:
        program = program.bind_defaults() if sizes is None else program.bind(**sizes)
        kernel = polymap.compile(program)
    return program, kernel, sizes or {}


# ------------------------------------------------------------------------ models


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_model_runs_on_the_host_and_compiles_with_nvrtc(name):
    program, kernel, sizes = compile_model(name)
    # SCIP proved every kernel's mapping optimal (or it had nothing to decide), and isl proved it
    assert all(r.outcome in (Outcome.OPTIMAL, Outcome.NO_DECISIONS) for r in kernel.mapping.solver), name
    assert kernel.mapping.proofs, name
    bound = program.bind(**{k: v for k, v in sizes.items() if k in program.param_names}).bind_defaults()
    inputs = random_inputs(bound, seed=3)
    got = kernel.run_host(**{k: v.copy() for k, v in inputs.items()})
    assert_matches(got, reference(program, **inputs), program)
    ptx = compile_ptx(kernel.source, name=f"{name}.cu")
    assert ".target sm_90" in ptx
    for launch in kernel.cuda.launches:
        assert f".entry {launch.function}(" in ptx


@pytest.mark.parametrize(
    "sizes",
    [
        {"M": 1, "N": 1, "K": 1},
        {"M": 33, "N": 31, "K": 3},
        {"M": 65, "N": 130, "K": 2},
        {"M": 2, "N": 257, "K": 9},
    ],
    ids=str,
)
def test_one_symbolic_matmul_kernel_runs_at_any_size(sizes):
    """One compiled kernel, sizes as arguments: non-divisible and unit extents."""
    program = load(ROOT / "models" / "matmul_1024.te")
    kernel = _matmul_kernel()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((sizes["M"], sizes["K"])).astype(np.float32)
    b = rng.standard_normal((sizes["K"], sizes["N"])).astype(np.float32)
    got = kernel.run_host(A=a, B=b)
    assert_matches(got, reference(program, A=a, B=b), program)
    np.testing.assert_allclose(got["C"], a @ b, rtol=1e-4, atol=1e-4)


@functools.cache
def _matmul_kernel():
    return polymap.compile(load(ROOT / "models" / "matmul_1024.te"))


def test_accumulator_lives_in_a_register():
    mapping = polymap.optimize(load(ROOT / "models" / "matmul_1024.te"), staging=False)
    source = polymap.compile(mapping.program, mapping).source
    assert re.search(r"\n *float C_acc;\n", source), "a 0-d block-local buffer is a C variable"
    assert "C_acc += A[" in source
    loop = source[source.index("for (int k") :]
    loop = loop[: loop.index("}")]
    assert "C[" not in loop, "no global access to C inside the k loop"


def test_staged_accumulator_is_held_per_point_of_the_thread():
    kernel = _matmul_kernel()
    km = kernel.mapping.kernels[0]
    points = km.loops[0].seq * km.loops[1].seq
    assert km.staging is not None
    if points > 1:
        assert re.search(rf"\n *float C_acc\[{points}\];", kernel.source)
    # the body's k loop, inside a tile (the tile copies' own loops come first)
    loop = kernel.source[re.search(r"for \(int k = \d+ \* kt;", kernel.source).start() :]
    loop = loop[: loop.index("}")]
    assert "C[" not in loop and "A_sh[" in loop and "B_sh[" in loop


# ----------------------------------------------------------- mappings by hand


TRIANGLE = """
param N
in L: f32[N, N]
in x: f32[N]
out y: f32[N, N]
par N i { par i + 1 j {
  y[i, j] = 0
  seq j + 1 k { y[i, j] += L[i, k] * x[k] }
} }
"""


@functools.cache
def _triangle_mapping():
    return polymap.optimize(parse(TRIANGLE, name="tri"))


def _hand_loop(index, axis, threads, seq, distribution, like: LoopMapping) -> LoopMapping:
    """A loop mapped by hand; a grouped one in groups of half its points (blocked where it
    has fewer than 4: no group lies strictly between 1 and S)."""
    if distribution is Distribution.GROUPED and seq < 4:
        distribution = Distribution.BLOCKED
    group = seq // 2 if distribution is Distribution.GROUPED else 1
    return LoopMapping(
        index, axis, axis, threads, seq, distribution, like.extent, like.max_extent, group=group
    )


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([1, 2, 4, 8, 32]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from(list(Distribution)),
    st.sampled_from([1, 4, 16]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(list(Distribution)),
    st.booleans(),
    st.integers(1, 40),
)
def test_any_valid_mapping_of_a_triangular_nest_runs_correctly(ti, si, di, tj, sj, dj, swap, n):
    """Mappings made by hand (any thread counts, sequential parts, distributions, axes; the
    guards come from the isl AST): proved, emitted, and equal to the reference at a size
    that divides nothing."""
    program = parse(TRIANGLE, name="tri")
    mapping = _triangle_mapping()
    (km,) = mapping.kernels
    i, j = km.loops
    x, y = (Axis.X, Axis.Y) if swap else (Axis.Y, Axis.X)
    loops = (_hand_loop("i", x, ti, si, di, i), _hand_loop("j", y, tj, sj, dj, j))
    kernel = polymap.compile(program, replace(mapping, kernels=(KernelMapping(km.kernel, loops),)))
    note(kernel.source)
    rng = np.random.default_rng(n)
    inputs = {
        "L": rng.standard_normal((n, n)).astype(np.float32),
        "x": rng.standard_normal(n).astype(np.float32),
    }
    assert_matches(kernel.run_host(**inputs), reference(program, **inputs), program)


def test_a_hand_made_mapping_is_proved_before_code_is_generated():
    program = parse("param N\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = 2 * x[i] }", name="scale")
    mapping = polymap.optimize(program)
    (km,) = mapping.kernels
    (lm,) = km.loops
    broken = LoopMapping(
        lm.index,
        lm.thread_axis,
        lm.block_axis,
        lm.threads,
        lm.seq,
        lm.distribution,
        lm.extent,
        lm.max_extent,
        guard=False,
    )
    bad = replace(mapping, kernels=(KernelMapping(km.kernel, (broken,)),))
    with pytest.raises(VerificationError, match="outside"):
        polymap.compile(program, bad)
    other = parse("param N\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = 3 * x[i] }", name="other")
    with pytest.raises(ArgumentError, match="not for this program"):
        polymap.compile(other, mapping)


def test_mapping_with_all_three_axes_and_a_blocked_sequential_part():
    text = """
    param A, B, C
    in x: f64[A, B, C]
    out y: f64[A, B, C]
    par A a { par B b { par C c { y[a, b, c] = x[a, b, c] * a - b + c } } }
    """
    program = parse(text, name="three")
    mapping = polymap.optimize(program)
    (km,) = mapping.kernels
    a, b, c = km.loops
    loops = (
        LoopMapping("a", Axis.Z, Axis.Z, 2, 1, Distribution.CYCLIC, a.extent, a.max_extent),
        LoopMapping("b", Axis.Y, Axis.Y, 4, 1, Distribution.CYCLIC, b.extent, b.max_extent),
        LoopMapping("c", Axis.X, Axis.X, 8, 2, Distribution.BLOCKED, c.extent, c.max_extent),
    )
    kernel = polymap.compile(program, replace(mapping, kernels=(KernelMapping(km.kernel, loops),)))
    assert "dim3(8, 4, 2)" in kernel.source
    # a full block runs a thread's two points of c in a loop of constant trip count, without
    # a guard, which the compiler unrolls; the other blocks run the same loop with isl's
    # bound on the points as a guard inside
    body = kernel.source[kernel.source.index("__global__") :]
    # the two codes are two functions, the blocks at an edge the second
    start = body.index("// a full block: every point in range")
    full = body[start : body.index("__global__", start)]
    edge = body[body.index(EDGE_BLOCK_NOTE) :]
    loop = re.compile(r"POLYMAP_UNROLL\n( *)for \(int s_c = 0; s_c <= 1; \+\+s_c\) \{")
    in_full, in_edge = loop.search(full), loop.search(edge)
    assert in_full and in_edge and len(in_edge[1]) == len(in_full[1]) + 2  # under the edge's guard
    assert full.count("// S0: y[a, b, c] =") == 1 and "if (" not in full
    assert (
        edge.count("// S0: y[a, b, c] =") == 1 and "if (s_c <= pm_min(1, C - 16 * bx - 2 * tx - 1)) {" in edge
    )
    x = np.random.default_rng(1).standard_normal((3, 5, 37))
    assert_matches(kernel.run_host(x=x), reference(program, x=x), program)


def test_a_points_loop_whose_first_point_varies_keeps_isls_lower_bound_as_a_guard():
    """Under a triangle (``j >= i``) a thread's first point of j depends on its block and
    thread: the points' loop keeps its constant bounds (the compiler unrolls it) and isl's
    lower bound becomes the guard inside; the elements below the diagonal stay unwritten."""
    text = "param N\nin x: f32[N, N]\nout y: f32[N, N]\npar N i { par N j { if j >= i { y[i, j] = x[i, j] * 2 } } }"
    program = parse(text, name="tri").bind(N=100)
    pins = {"j": {"thread": "x", "threads": 32, "seq": 2, "distribution": "blocked"}, "i": {"thread": "y"}}
    mapping = polymap.optimize(program, pins=pins)
    kernel = polymap.compile(mapping.program, mapping)
    assert re.search(r"for \(int s_j = 0; s_j <= 1; \+\+s_j\) \{\n\s*if \(s_j >= pm_max\(0, ", kernel.source)
    x = np.random.default_rng(3).standard_normal((100, 100)).astype(np.float32)
    out = kernel.run_host(x=x)
    assert_matches(out, reference(program, x=x), program)
    assert np.array_equal(out["y"], np.triu(x * 2))


def test_a_strided_points_loop_keeps_its_constant_bounds_and_isls_stride_as_a_guard():
    """``j % 3 == 1`` with a thread's 4 cyclic points of j: isl steps the points' loop by 3
    from a start that depends on the thread; the loop keeps its constant bounds (for the
    compiler to unroll) and the stride becomes part of the guard."""
    text = "param M = 37\nparam N = 70\nin x: f32[M, N]\nout y: f32[M, N]\npar M i { par N j { if j % 3 == 1 { y[i, j] = x[i, j] * 2 } } }"
    program = parse(text, name="strided")
    pins = {"j": {"thread": "x", "threads": 32, "seq": 4, "distribution": "cyclic"}}
    mapping = polymap.optimize(program, pins=pins)
    kernel = polymap.compile(mapping.program, mapping)
    assert re.search(
        r"POLYMAP_UNROLL\n\s*for \(int s_j = 0; s_j <= 3; \+\+s_j\) \{\n\s*if \(s_j >= .*% 3 == 0\) \{",
        kernel.source,
    )
    x = np.random.default_rng(5).standard_normal((37, 70)).astype(np.float32)
    out = kernel.run_host(x=x)
    assert_matches(out, reference(program, x=x), program)
    assert np.array_equal(out["y"], np.where(np.arange(70) % 3 == 1, x * 2, 0))


# --------------------------------------------------------------- random programs


# the functions whose last bits libm and NumPy may round differently (sqrt is exact in both)
_LIBM = re.compile(r"\b(exp|log|tanh|sin|cos|erf|pow|sigmoid)\(")


def _check_random(text: str, seed: int) -> None:
    program = parse(text)
    rng = np.random.default_rng(seed)
    inputs = {}
    for decl in program.inputs:
        shape = tuple(e.value for e in decl.shape)
        if decl.dtype.is_float:
            inputs[decl.name] = (rng.standard_normal(shape) * 2).astype(decl.dtype.numpy)
        else:  # no zeros: i32 division by zero is an error in the reference, a trap in C
            inputs[decl.name] = rng.integers(1, 6, shape).astype(np.int32)
    try:
        want = execute(program, inputs).outputs
    except ArgumentError as err:
        assert "division by zero" in str(err)
        return
    kernel = polymap.compile(program)
    note(kernel.source)
    assert ".target sm_90" in compile_ptx(kernel.source)
    got = kernel.run_host(**inputs)
    with np.errstate(invalid="ignore"):
        for name, expected in want.items():
            actual = got[name]
            if expected.dtype.kind == "i" and not _LIBM.search(text):
                np.testing.assert_array_equal(actual, expected, err_msg=name)
            elif expected.dtype.kind == "i":  # an integer from a float that libm rounds its own way:
                # exp(exp(3)) is 528491328 in libm's f32 and 528491296 in NumPy's, one f32 ulp apart
                np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=1, err_msg=name)
            else:  # libm and NumPy may differ in the last bits of exp, log, tanh
                np.testing.assert_allclose(
                    actual, expected, rtol=2e-5, atol=1e-6, equal_nan=True, err_msg=name
                )


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), st.integers(0, 2**16))
def test_random_programs_run_on_the_host_like_the_reference(text, seed):
    note(text)
    _check_random(text, seed)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_statements(), st.integers(0, 2**16))
def test_random_expressions_have_the_reference_typing(text, seed):
    note(text)
    _check_random(text, seed)


def test_floor_division_and_modulo_of_negative_values():
    text = """
    in x: i32[6]
    out y: i32[8]
    out z: i32[8]
    par 8 i { y[i] = x[(i - 3) % 4] * 10 + x[(i - 3) // 2 + 2]; z[i] = (i - 5) / 2 }
    """
    program = parse(text, name="quasi")
    x = np.arange(1, 7, dtype=np.int32)
    kernel = polymap.compile(program)
    got = kernel.run_host(x=x)
    i = np.arange(8)
    np.testing.assert_array_equal(got["y"], x[(i - 3) % 4] * 10 + x[(i - 3) // 2 + 2])
    np.testing.assert_array_equal(got["z"], np.trunc((i - 5) / 2).astype(np.int32))  # i32 / truncates
    assert "pm_mod(" in kernel.source and "pm_floord(" in kernel.source


# ------------------------------------------------------------------- errors


def test_sizes_outside_the_proved_context_are_refused():
    program = parse("param N\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i] + 1 }", name="ctx")
    kernel = polymap.compile(program, context="N >= 64")
    assert "return -1" in kernel.source
    with pytest.raises(ArgumentError, match="outside the context"):
        kernel.run_host(x=np.zeros(10, np.float32))
    x = np.arange(100, dtype=np.float32)
    np.testing.assert_array_equal(kernel.run_host(x=x)["y"], x + 1)
    with pytest.raises(ArgumentError, match="outside the context"):  # the default context: sizes >= 1
        _matmul_kernel().run_host(A=np.zeros((3, 0), np.float32), B=np.zeros((0, 2), np.float32))


def test_wrong_inputs_are_argument_errors():
    kernel = _matmul_kernel()
    with pytest.raises(ArgumentError, match="wrong dtype"):
        kernel.run_host(A=np.zeros((2, 3)), B=np.zeros((3, 2), np.float32))
    with pytest.raises(ArgumentError, match="wrong shape"):
        kernel.run_host(A=np.zeros((2, 3, 1), np.float32), B=np.zeros((3, 2), np.float32))
    with pytest.raises(ArgumentError, match="conflicting values for size K"):
        kernel.run_host(A=np.zeros((2, 3), np.float32), B=np.zeros((4, 2), np.float32))
    with pytest.raises(ArgumentError, match="missing input 'B'"):
        kernel.run_host(A=np.zeros((2, 3), np.float32))


def test_a_private_buffer_needs_a_constant_shape():
    text = "param N\nin x: f32[N, N]\nout y: f32[N]\npar N i { new t: f32[N]\n seq N k { t[k] = x[i, k] }\n y[i] = t[0] }"
    with pytest.raises(CodegenError, match="'t'.*constant shape"):
        polymap.compile(parse(text, name="priv"))


def test_compile_errors_carry_the_log_and_the_line():
    kernel = _matmul_kernel()
    broken = re.sub(
        r"^(\s*C_acc(\[[^\]]*\])? = )0\.0f;", r"\1undefined_name;", kernel.source, count=1, flags=re.M
    )
    assert broken != kernel.source
    with pytest.raises(CudaCompileError) as err:
        compile_ptx(broken, name="broken.cu")
    assert "undefined_name" in err.value.line and "error" in err.value.log
    with pytest.raises(CudaCompileError, match="host C\\+\\+ compiler"):
        run_host(
            replace(kernel.cuda, source=broken),
            {"A": np.zeros((1, 1), np.float32), "B": np.zeros((1, 1), np.float32)},
        )


# ------------------------------------------------------------------- the text


def test_emitted_text_is_deterministic_and_readable():
    program = load(ROOT / "models" / "gpt3_attention_tiny.te")
    first = polymap.compile(program).source
    second = emit_cuda(polymap.optimize(load(ROOT / "models" / "gpt3_attention_tiny.te"))).source
    assert first == second
    assert "// program gpt3_attention_tiny" in first and "predicted" in first
    for name in ("X", "Wq", "Q", "S", "O", "s", "d", "e"):
        assert re.search(rf"\b{name}\b", first), name
    # one kernel per einsum line, and the edge blocks of a kernel a function of their own
    kernels = re.findall(r"__global__ void __launch_bounds__\([\d, ]+\) (\w+)\(", first)
    assert [k for k in kernels if not k.endswith("_edge")] == [
        f"gpt3_attention_tiny_kernel{n}" for n in range(5)
    ]


@pytest.mark.parametrize("model", ["matmul_256x256x32", "softmax_rows", "jacobi1d"])
def test_golden_text(model):
    """The emitted text of a few kernels, byte for byte."""
    program = load(ROOT / "models" / f"{model}.te")
    source = polymap.compile(program).source
    path = GOLDEN / f"{model}.cu"
    if os.environ.get("POLYMAP_REGEN_GOLDEN"):
        path.write_text(source)
    assert path.exists(), f"missing {path}: run with POLYMAP_REGEN_GOLDEN=1"
    assert source == path.read_text(), f"{model}: emitted text changed; regenerate if intended"


def test_program_names_that_spell_c_macros_or_polymap_names_are_renamed():
    text = """
    param INT_MAX
    in NULL: f32[INT_MAX]
    out fnclash_kernel0: f32[INT_MAX]
    out errno: f32[INT_MAX]
    par INT_MAX M_PI { fnclash_kernel0[M_PI] = NULL[M_PI] + 1; errno[M_PI] = -(-NULL[M_PI]) }
    """
    program = parse(text, name="fnclash")
    kernel = polymap.compile(program)
    x = np.arange(40, dtype=np.float32)
    assert_matches(kernel.run_host(NULL=x), reference(program, NULL=x), program)
    assert ".entry" in kernel.ptx()


def test_an_empty_nest_is_not_launched():
    """The C launcher skips a grid with no blocks; the Python launch plan (CuPy) must too."""
    from polymap.runtime.launches import launches

    program = parse(
        "param N\nin x: f32[N]\nout y: f32[N]\npar N - 5 i { y[i] = x[i] }\npar N i { y[i] += 1 }", name="e"
    )
    kernel = polymap.compile(program)
    planned = [(launch.kernel.function, launch.grid) for launch in launches(kernel.cuda, {"N": 3})]
    assert len(planned) == 1 and planned[0][0].endswith("kernel1") and min(planned[0][1]) > 0
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(kernel.run_host(x=x)["y"], np.ones(3, np.float32))


def test_an_and_inside_an_or_is_printed_in_parentheses():
    """C needs none, but g++ and nvcc warn under -Wall (-Wparentheses) where && sits inside
    || unparenthesized: a condition the program writes (the statement printer) and one isl
    builds (the launcher's choice of the edge blocks' function) both get them."""
    text = (
        "param N\nin x: f32[N]\nout y: f32[N]\n"
        "par N i { if x[i] > 0.0 and x[i] < 1.0 or x[i] > 2.0 { y[i] = x[i] } else { y[i] = 0.0 } }"
    )
    program = parse(text, name="cond")
    source = polymap.compile(program).source
    assert re.search(r"if \(\(x\[(.+)\] > 0\.0f && x\[\1\] < 1\.0f\) \|\| x\[\1\] > 2\.0f\)", source)
    matmul = polymap.compile(load(ROOT / "models" / "matmul_1024.te")).source
    assert "if ((N >= 128 && M % 32 >= 1) || N % 128 >= 1) {" in matmul
    x = np.array([-1.0, 0.5, 1.5, 3.0], np.float32)
    assert polymap.compile(program).run_host(x=x)["y"].tolist() == [0.0, 0.5, 0.0, 3.0]
