"""The generated kernels on a real GPU through CuPy (``pytest -m gpu``): the same programs
as tests/test_codegen.py, compared with the reference executor. Skipped, with the reason,
where there is no usable GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import polymap
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
