"""Arrays of other libraries through DLPack and ``__cuda_array_interface__`` on the host
path (the device path is in tests/test_gpu.py): a host DLPack producer is read without a
copy, a GPU one is recognized as a device array wherever it comes from."""

from __future__ import annotations

import numpy as np
import pytest

import polymap
from polymap.errors import ArgumentError
from polymap.runtime.arguments import is_device_array

AXPY = """
param N = 8
in  alpha: f32
in  x: f32[N]
in  y: f32[N]
out z: f32[N]
par N i { z[i] = alpha * x[i] + y[i] }
"""


class HostDLPack:
    """Only the DLPack protocol over a NumPy array, as a CPU tensor of another library
    (PyTorch, JAX) offers it: no ``__array__``, no buffer protocol."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)):
        self._array, self._device = array, device

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


def test_a_host_dlpack_array_runs_on_the_host_and_in_the_reference():
    program = polymap.parse(AXPY, name="axpy")
    kernel = polymap.compile(program)
    x, y = np.arange(8, dtype=np.float32), np.full(8, 0.5, np.float32)
    want = 2.0 * x + y
    got = kernel.run_host(alpha=2.0, x=HostDLPack(x), y=HostDLPack(y))
    np.testing.assert_array_equal(got["z"], want)
    np.testing.assert_array_equal(polymap.reference(program, alpha=2.0, x=HostDLPack(x), y=y)["z"], want)


def test_a_dlpack_array_keeps_the_dtype_check():
    program = polymap.parse(AXPY, name="axpy")
    with pytest.raises(ArgumentError, match="'x' .* has the wrong dtype: expected float32, got float64"):
        polymap.reference(program, alpha=2.0, x=HostDLPack(np.zeros(8)), y=np.zeros(8, np.float32))


def test_gpu_memory_is_a_device_array_whichever_protocol_says_so():
    cuda = HostDLPack(np.zeros(8, np.float32), device=(2, 0))  # kDLCUDA
    managed = HostDLPack(np.zeros(8, np.float32), device=(13, 0))  # kDLCUDAManaged
    assert is_device_array(cuda) and is_device_array(managed)
    assert not is_device_array(HostDLPack(np.zeros(8, np.float32)))  # kDLCPU
    assert not is_device_array(np.zeros(8, np.float32)) and not is_device_array(2.0)

    class Unsure(HostDLPack):
        def __dlpack_device__(self):
            raise RuntimeError("no device")

    assert not is_device_array(Unsure(np.zeros(8, np.float32)))
    kernel = polymap.compile(polymap.parse(AXPY, name="axpy"))
    with pytest.raises(
        ArgumentError, match=r"run_host takes host arrays \(NumPy, or DLPack on the CPU\); 'x' is a device"
    ):
        kernel.run_host(alpha=2.0, x=cuda, y=np.zeros(8, np.float32))
    with pytest.raises(
        ArgumentError, match="input 'x' is a GPU array: the reference executor runs on the host"
    ):
        polymap.reference(kernel.program, alpha=2.0, x=cuda, y=np.zeros(8, np.float32))


def test_a_producer_that_fails_is_named_not_leaked():
    class Broken(HostDLPack):
        def __dlpack__(self, **kwargs):
            raise KeyError("no capsule today")

    program = polymap.parse(AXPY, name="axpy")
    with pytest.raises(
        ArgumentError, match=r"input 'x' could not be read through DLPack: KeyError: 'no capsule today'"
    ):
        polymap.reference(program, alpha=2.0, x=Broken(np.zeros(8, np.float32)), y=np.zeros(8, np.float32))
