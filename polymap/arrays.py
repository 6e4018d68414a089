"""Arrays of other libraries, recognized by the protocols they speak rather than by their
type: GPU memory through ``__cuda_array_interface__`` or a DLPack device that is CUDA
memory. A leaf module: the reference executor and the runtime both ask it."""

from __future__ import annotations

from typing import Any

# DLPack's device types (dlpack.h): memory a CUDA kernel reads directly
_DLPACK_CUDA_DEVICES = (2, 13)  # kDLCUDA, kDLCUDAManaged


def is_device_array(value: Any) -> bool:
    """A GPU array: one with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba), or a
    DLPack producer whose ``__dlpack_device__`` is CUDA memory (JAX, and the others too)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    return (_dlpack_device(value) or (None,))[0] in _DLPACK_CUDA_DEVICES


def _dlpack_device(value: Any) -> tuple | None:
    get = getattr(value, "__dlpack_device__", None)
    if get is None or isinstance(value, type):
        return None
    try:
        return tuple(get())
    except Exception:  # noqa: BLE001 - a producer that cannot say is not taken for a GPU array
        return None
