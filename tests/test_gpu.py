"""The generated kernels on a real GPU through CuPy (``pytest -m gpu``): the same programs
as tests/test_codegen.py, compared with the reference executor. Skipped, with the reason,
where there is no usable GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import polymap
from polymap.errors import ArgumentError
from polymap.runtime.gpu import gpu_available

sys.path.insert(0, str(Path(__file__).parent))
from test_codegen import TRIANGLE, assert_matches, compile_model
from test_models import NUMERIC, random_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="no usable GPU (CuPy missing or no CUDA device)"),
]


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_model_on_the_gpu_equals_the_reference(name):
    program, kernel, sizes = compile_model(name)
    bound = program.bind(**{k: v for k, v in sizes.items() if k in program.param_names}).bind_defaults()
    inputs = random_inputs(bound, seed=5)
    got = kernel(**{k: v.copy() for k, v in inputs.items()})
    assert all(isinstance(v, np.ndarray) for v in got.values()), "NumPy in, NumPy out"
    assert_matches(got, polymap.reference(program, **inputs), program)


@pytest.mark.parametrize("n", [1, 31, 100, 257])
def test_triangular_and_non_divisible_sizes_on_the_gpu(n):
    program = polymap.parse(TRIANGLE, name="tri")
    kernel = polymap.compile(program)
    rng = np.random.default_rng(n)
    inputs = {"L": rng.standard_normal((n, n)).astype(np.float32), "x": rng.standard_normal(n).astype(np.float32)}
    assert_matches(kernel(**inputs), polymap.reference(program, **inputs), program)


def test_cupy_arrays_stay_on_the_device():
    import cupy

    program, kernel, _ = compile_model("matmul_1024")
    a = cupy.random.standard_normal((70, 33), dtype=cupy.float32)
    b = cupy.random.standard_normal((33, 45), dtype=cupy.float32)
    got = kernel(A=a, B=b)
    assert isinstance(got["C"], cupy.ndarray)
    want = polymap.reference(program, A=a.get(), B=b.get())
    assert_matches({"C": got["C"].get()}, want, program)


def test_gpu_and_host_runs_agree():
    program, kernel, _ = compile_model("softmax_rows")
    inputs = random_inputs(program.bind(M=37, N=70), seed=9)
    gpu, host = kernel(**inputs), kernel.run_host(**inputs)
    assert_matches(gpu, {k: np.asarray(v) for k, v in host.items()}, program)


def test_i32_division_by_zero_on_the_gpu_is_the_references_error():
    """The fault word of the CUDA module (``pm_fault``, read with RawModule.get_global) turns
    a division by zero into the reference's ArgumentError; INT_MIN / -1 wraps as there."""
    from test_runtime_robust import DIVIDE, INT_MIN

    program = polymap.parse(DIVIDE, name="divide")
    kernel = polymap.compile(program)
    bad = {"a": np.array([7, -7, 3, 1], np.int32), "b": np.array([2, 2, 0, 5], np.int32)}
    with pytest.raises(ArgumentError) as want:
        polymap.reference(program, **bad)
    with pytest.raises(ArgumentError) as caught:
        kernel(**bad)
    assert str(caught.value) == str(want.value)
    good = {"a": np.array([INT_MIN, INT_MIN, 9, -9], np.int32), "b": np.array([-1, 1, -2, 4], np.int32)}
    got, expected = kernel(**good), polymap.reference(program, **good)  # the word was cleared
    for name in ("c", "d"):
        np.testing.assert_array_equal(got[name], expected[name])
