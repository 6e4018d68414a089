"""The generated kernels on a real GPU through CuPy (``pytest -m gpu``): the same programs
as tests/test_codegen.py, compared with the reference executor. Skipped, with the reason,
where there is no usable GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
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
    inputs = {
        "L": rng.standard_normal((n, n)).astype(np.float32),
        "x": rng.standard_normal(n).astype(np.float32),
    }
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


def test_pytorch_cuda_tensors_in_give_pytorch_tensors_out():
    """A PyTorch CUDA tensor goes in without a copy (``__cuda_array_interface__``) and the
    outputs come back as PyTorch tensors on the device (``torch.from_dlpack``)."""
    torch = pytest.importorskip("torch")
    program, kernel, _ = compile_model("matmul_1024")
    a = torch.randn(70, 33, device="cuda", dtype=torch.float32)
    b = torch.randn(33, 45, device="cuda", dtype=torch.float32)
    got = kernel(A=a, B=b)
    assert isinstance(got["C"], torch.Tensor) and got["C"].is_cuda
    want = polymap.reference(program, A=a.cpu().numpy(), B=b.cpu().numpy())
    assert_matches({"C": got["C"].cpu().numpy()}, want, program)


def test_a_dlpack_only_gpu_array_runs_and_comes_back_as_cupy():
    """A GPU array that speaks DLPack alone (no ``__cuda_array_interface__``) is read through
    ``cupy.from_dlpack``; its library (this test module) has no ``from_dlpack``, so the
    outputs are CuPy arrays."""
    import cupy

    class DeviceDLPack:
        def __init__(self, array):
            self._array = array

        def __dlpack__(self, **kwargs):
            return self._array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self._array.__dlpack_device__()

    program, kernel, _ = compile_model("matmul_1024")
    a = cupy.random.standard_normal((40, 17), dtype=cupy.float32)
    b = cupy.random.standard_normal((17, 23), dtype=cupy.float32)
    got = kernel(A=DeviceDLPack(a), B=DeviceDLPack(b))
    assert isinstance(got["C"], cupy.ndarray)
    want = polymap.reference(program, A=a.get(), B=b.get())
    assert_matches({"C": got["C"].get()}, want, program)


def test_gpu_and_host_runs_agree():
    program, kernel, _ = compile_model("softmax_rows")
    inputs = random_inputs(program.bind(M=37, N=70), seed=9)
    gpu, host = kernel(**inputs), kernel.run_host(**inputs)
    assert_matches(gpu, {k: np.asarray(v) for k, v in host.items()}, program)


def test_lanes_on_the_gpu_hold_the_bounds_the_host_runs_are_held_to():
    """A warp per point on the device (issue 12): shuffles and __syncwarp as CUDA runs them,
    against the expected values of tests/test_lanes.py (a reordered f32 sum within its
    bound, integers exactly, softmax and layer norm to float64)."""
    from test_lanes import INT_MAX_AND_SUM, ROW_SUM, _sum_bound

    lanes = {"i": {"lanes": 32}}
    rng = np.random.default_rng(11)
    row_sum = polymap.compile(polymap.parse(ROW_SUM, name="row_sum").bind_defaults(), pins=lanes)
    x = rng.standard_normal((70, 1000)).astype(np.float32)
    got = row_sum(X=x)["y"]
    assert np.all(np.abs(got - x.astype(np.float64).sum(axis=1)) <= _sum_bound(x.astype(np.float64)))
    ints = polymap.compile(polymap.parse(INT_MAX_AND_SUM, name="ints").bind_defaults(), pins=lanes)
    xi = rng.integers(-1000, 1000, (40, 77)).astype(np.int32)
    got = ints(X=xi)
    np.testing.assert_array_equal(got["total"], (xi.astype(np.int64) * 3).sum(axis=1))
    np.testing.assert_array_equal(got["top"], xi.max(axis=1))
    for name, sizes in (("softmax_rows", {"M": 37, "N": 19}), ("layernorm", {"M": 33, "N": 100})):
        program = polymap.load(Path(__file__).parent.parent / "models" / f"{name}.te").bind(**sizes)
        kernel = polymap.compile(program, pins=lanes)
        inputs = random_inputs(program, seed=12)
        assert_matches(kernel(**inputs), polymap.reference(program, **inputs), program)


def test_kernel_time_replays_a_graph_and_leaves_the_outputs_right():
    """kernel.time captures the launches into a CUDA graph (no fallback to Python launches),
    and a later call still computes the reference's values: the timing ran on its own
    buffers."""
    program, kernel, _ = compile_model("softmax_rows")
    inputs = random_inputs(program.bind(M=64, N=100), seed=3)
    timing = kernel.time(repeat=3, **inputs)
    assert timing.method == "graph", timing.why_not_graph
    assert len(timing.samples_s) == 3 and all(s > 0 for s in timing.samples_s)
    assert timing.runs_per_sample >= 1
    assert_matches(kernel(**inputs), polymap.reference(program, **inputs), program)


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


def compute_sanitizer() -> str | None:
    """The compute-sanitizer binary: on the PATH, else in the CUDA toolkit's bin folder."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        candidate = Path(home or "/nonexistent") / "bin" / "compute-sanitizer"
        if candidate.is_file():
            return str(candidate)
    return None


# Every model through CuPy (compared with the reference), then an i32 division by zero
# (the fault word's atomic and its read back), in one process per sanitizer tool.
SANITIZED = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import polymap
from test_codegen import assert_matches, compile_model
from test_models import NUMERIC, random_inputs
from test_runtime_robust import DIVIDE
for name in sorted(NUMERIC):
    program, kernel, sizes = compile_model(name)
    bound = program.bind(**{{k: v for k, v in sizes.items() if k in program.param_names}}).bind_defaults()
    inputs = random_inputs(bound, seed=5)
    got = kernel(**{{k: v.copy() for k, v in inputs.items()}})
    assert_matches(got, polymap.reference(program, **inputs), program)
    print("checked", name, flush=True)
kernel = polymap.compile(polymap.parse(DIVIDE, name="divide"))
try:
    kernel(a=np.arange(64, dtype=np.int32), b=np.zeros(64, np.int32))
except polymap.errors.ArgumentError:
    print("checked divide", flush=True)
else:
    raise SystemExit("a division by zero was not reported")
"""


@pytest.mark.skipif(
    compute_sanitizer() is None, reason="compute-sanitizer is not installed (CUDA toolkit bin/)"
)
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_every_model_is_clean_under_compute_sanitizer(tool):
    script = SANITIZED.format(tests=str(Path(__file__).parent))
    command = [compute_sanitizer(), "--tool", tool, "--error-exitcode", "97", sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    # memcheck and synccheck end with "ERROR SUMMARY: 0 errors"; racecheck with
    # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" (seen on an H100, CUDA 13.0)
    clean = (
        "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
        if tool == "racecheck"
        else "ERROR SUMMARY: 0 errors"
    )
    assert clean in log, log[-6000:]
    assert log.count("checked ") == len(NUMERIC) + 1, log[-6000:]


def test_a_gathered_index_outside_its_dimension_is_a_bounds_error_on_the_gpu():
    """A gather (issue 13) on the device: rows read as NumPy reads them, and an id outside
    the table recorded by pm_gather and raised as the host run raises it (never a read out
    of bounds: compute-sanitizer over the models covers the kernel)."""
    from test_gather import EMBEDDING

    from polymap.errors import BoundsError

    program = polymap.parse(EMBEDDING, name="emb").bind_defaults()
    kernel = polymap.compile(program)
    rng = np.random.default_rng(13)
    e = rng.standard_normal((50, 24)).astype(np.float32)
    ids = rng.integers(0, 50, 40).astype(np.int32)
    np.testing.assert_array_equal(kernel(E=e, ids=ids)["Y"], e[ids])
    ids[11] = 50
    with pytest.raises(BoundsError) as gpu:
        kernel(E=e, ids=ids)
    with pytest.raises(BoundsError) as host:
        kernel.run_host(E=e, ids=ids)
    assert str(gpu.value) == str(host.value)


def test_an_if_on_data_runs_on_the_gpu_as_numpy_computes_it():
    """Predicated statements (issue 13) on the device: an exact i32 count under a float
    condition, a conditional sum spread over a warp, and an in-place clamp."""
    text = """param M = 64
param N = 300
in    A: f32[M, N]
inout n: i32[M]
out   s: f32[M]
inout B: f32[M, N]
par M i {
  seq N j {
    if A[i, j] > 0 {
      n[i] += 1
      s[i] += A[i, j]
    }
  }
  par N j { if B[i, j] < 0 { B[i, j] = 0 } }
}"""
    program = polymap.parse(text, name="data_if").bind_defaults()
    kernel = polymap.compile(program)
    rng = np.random.default_rng(14)
    a = rng.standard_normal((64, 300)).astype(np.float32)
    b = rng.standard_normal((64, 300)).astype(np.float32)
    n = np.full(64, 16777217, np.int32)
    got = kernel(A=a, n=n, B=b)
    np.testing.assert_array_equal(got["n"], n + (a > 0).sum(1))
    np.testing.assert_allclose(got["s"], np.where(a > 0, a, 0).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["B"], np.where(b < 0, np.float32(0), b))


def test_blocks_of_warps_on_the_gpu_hold_the_bounds_the_host_runs_are_held_to():
    """Several warps per point on the device (issue 12): the shared-memory combine and the
    block's barriers as CUDA runs them, at 64, 256 and 1024 lanes, against the expected
    values of tests/test_lanes.py; the masked softmax as SCIP maps it (a block per row)."""
    from test_lanes import INT_MAX_AND_SUM, ROW_SUM, _sum_bound

    rng = np.random.default_rng(13)
    x = rng.standard_normal((70, 1000)).astype(np.float32)
    xi = rng.integers(-1000, 1000, (40, 77)).astype(np.int32)
    for lanes in (64, 256, 1024):
        pins = {"i": {"lanes": lanes}, "j": {"split": 1}}
        row_sum = polymap.compile(polymap.parse(ROW_SUM, name="row_sum").bind_defaults(), pins=pins)
        got = row_sum(X=x)["y"]
        assert np.all(np.abs(got - x.astype(np.float64).sum(axis=1)) <= _sum_bound(x.astype(np.float64)))
        ints = polymap.compile(
            polymap.parse(INT_MAX_AND_SUM, name="ints").bind_defaults(), pins={"i": {"lanes": lanes}}
        )
        got = ints(X=xi)
        np.testing.assert_array_equal(got["total"], (xi.astype(np.int64) * 3).sum(axis=1))
        np.testing.assert_array_equal(got["top"], xi.max(axis=1))
    program = polymap.load(Path(__file__).parent.parent / "models" / "masked_softmax.te").bind(N=300)
    kernel = polymap.compile(program)
    assert kernel.mapping.kernels[0].lanes > 32
    inputs = random_inputs(program, seed=14)
    assert_matches(kernel(**inputs), polymap.reference(program, **inputs), program)


def test_rows_beyond_the_grid_limit_run_in_parts_on_the_gpu():
    """75000 blocks of rows on y (a launch holds 65535): CuPy's launches and the C
    launcher both launch them in two parts (``KernelLaunch.parts``); both equal 2 X."""
    from test_grid_parts import SCALE

    kernel = polymap.compile(polymap.parse(SCALE))
    x = np.random.default_rng(0).random((300000, 64)).astype(np.float32)
    np.testing.assert_array_equal(kernel(X=x)["Y"], x * 2)
    np.testing.assert_array_equal(kernel.run_host(X=x)["Y"], x * 2)


@pytest.mark.parametrize(
    "sizes",
    [
        {"M": 1024, "N": 1024, "K": 64},  # every block full: the edge function not launched
        {"M": 1000, "N": 1000, "K": 70},  # full blocks and blocks at an edge: both functions
        {"M": 20, "N": 100, "K": 3},  # no block full: only the edge function
    ],
)
def test_a_kernel_split_in_two_functions_equals_the_reference_on_the_gpu(sizes):
    """matmul_1024 runs its blocks at an edge in ``matmul_1024_kernel0_edge``, launched after
    the full blocks' function where some block is at an edge (``KernelLaunch.functions``):
    CuPy's launches take the same decisions as the C launcher, and the result is the
    reference's at sizes with each kind of block alone and with both."""
    from polymap.runtime.launches import launches

    program, kernel, _ = compile_model("matmul_1024")
    (launch,) = kernel.cuda.launches
    assert launch.edge is not None
    functions = {at.function for at in launches(kernel.cuda, sizes)}
    full_only = sizes["M"] % 32 == 0 and sizes["N"] % 128 == 0
    assert (launch.edge.function in functions) == (not full_only)
    rng = np.random.default_rng(sizes["K"])
    a = rng.standard_normal((sizes["M"], sizes["K"])).astype(np.float32)
    b = rng.standard_normal((sizes["K"], sizes["N"])).astype(np.float32)
    assert_matches(kernel(A=a, B=b), polymap.reference(program, A=a, B=b), program)
    assert_matches(kernel.run_host(A=a, B=b), polymap.reference(program, A=a, B=b), program)
