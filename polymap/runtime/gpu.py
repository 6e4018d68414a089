"""Running emitted CUDA C on a GPU through CuPy: the source is compiled by CuPy's
``RawModule`` (NVRTC, the same compiler the CI compile check uses), and the kernels are
launched from Python in the order and with the grids ``launches.py`` computes.

NumPy inputs are copied to the device and the outputs back. GPU arrays of any library
(``__cuda_array_interface__`` or DLPack) stay on the device, and the outputs come back as the
caller's array type where its library has ``from_dlpack`` (else as CuPy arrays)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from polymap.codegen.cuda import CudaProgram
from polymap.errors import ArgumentError, CudaCompileError, PolymapError
from polymap.ir.nodes import BufferKind, DType
from polymap.runtime.arguments import bind_arguments, is_device_array, scalar_value
from polymap.runtime.faults import FAULT_WORD, fault_error, records_faults
from polymap.runtime.launches import launches
from polymap.runtime.timing import Timing, time_device


class DeviceUnavailableError(PolymapError):
    """No usable GPU (CuPy missing, or no device): run on the host instead."""


def cupy_module():
    try:
        import cupy
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"CuPy is not installed ({exc}); install polymap with the gpu extra (pip install -e '.[gpu]') "
            "or run on the host (Kernel.run_host)"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise DeviceUnavailableError("CuPy found no CUDA device; run on the host (Kernel.run_host)")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise DeviceUnavailableError(f"CuPy cannot use a CUDA device ({exc}); run on the host") from None
    return cupy


def gpu_available() -> bool:
    try:
        cupy_module()
    except DeviceUnavailableError:
        return False
    return True


@lru_cache(maxsize=64)
def _module(source: str):
    cupy = cupy_module()
    try:
        module = cupy.RawModule(code=source, options=("-std=c++17",))
        module.compile()
    except cupy.cuda.compiler.CompileException as exc:
        raise CudaCompileError(
            f"NVRTC (through CuPy) could not compile the emitted code: {exc}", log=str(exc)
        ) from None
    return module


def _as_cupy(value: Any):
    """A GPU array of any library as a CuPy array over the same memory (no copy): through
    ``__cuda_array_interface__`` where it has one, else DLPack."""
    cupy = cupy_module()
    if isinstance(value, cupy.ndarray):
        return value
    if hasattr(value, "__cuda_array_interface__"):
        return cupy.asarray(value)
    return cupy.from_dlpack(value)


def _returned_as_callers(arrays: dict[str, Any]) -> Callable[[Any], Any]:
    """How outputs go back to the caller: as the caller's own GPU array type where its
    library can take a DLPack array (``torch.from_dlpack``, ``jax.numpy.from_dlpack``; no
    copy), else as CuPy arrays."""
    cupy = cupy_module()
    for value in arrays.values():
        if is_device_array(value) and not isinstance(value, cupy.ndarray):
            top = sys.modules.get(type(value).__module__.split(".")[0])
            for space in (top, getattr(top, "numpy", None)):
                take = getattr(space, "from_dlpack", None)
                if callable(take):
                    return take
    return lambda array: array


def prepare_gpu(cuda: CudaProgram, arrays: dict[str, Any]):
    """Device buffers for every launcher argument and the sizes; returns (buffers, sizes,
    on_device) where on_device says whether the caller passed device arrays."""
    cupy = cupy_module()
    on_device = any(is_device_array(v) for v in arrays.values())
    if on_device and (bf16 := [d.name for d in cuda.program.buffers if d.dtype is DType.BF16]):
        raise ArgumentError(
            f"the program has bf16 buffers ({', '.join(bf16)}), which CuPy cannot hold: pass host "
            "arrays (ml_dtypes.bfloat16), and the outputs come back as host arrays"
        )
    arrays = {k: _as_cupy(v) if is_device_array(v) else v for k, v in arrays.items()}
    bound = bind_arguments(cuda, arrays)
    storage = {}
    for decl in bound.buffers:
        shape, dtype = bound.shapes[decl.name], _device_dtype(decl.dtype)
        if decl.kind in (BufferKind.IN, BufferKind.INOUT):
            given = bound.inputs[decl.name]
            if decl.dtype is DType.BF16:  # its bits (a host array: checked above)
                given = np.ascontiguousarray(given).view(np.uint16)
        if decl.kind is BufferKind.IN:
            storage[decl.name] = cupy.ascontiguousarray(cupy.asarray(given, dtype=dtype))
        elif decl.kind is BufferKind.INOUT:  # written: never the caller's own array
            storage[decl.name] = cupy.array(given, dtype=dtype, order="C", copy=True)
        elif decl.kind is BufferKind.OUT:
            storage[decl.name] = cupy.zeros(shape, dtype)
    for decl in cuda.scratch:  # the kernels' temporaries (the launcher's own allocation)
        storage[decl.name] = cupy.empty(bound.shapes[decl.name], _device_dtype(decl.dtype))
    return storage, bound.sizes, on_device


def _device_dtype(dtype: DType) -> np.dtype:
    """The CuPy dtype of a buffer: bf16 as its 16 bits (CuPy has no bfloat16; the kernel
    stores every 16-bit float as ``unsigned short``)."""
    return np.dtype(np.uint16) if dtype is DType.BF16 else dtype.numpy


def _to_host(array, dtype: DType) -> np.ndarray:
    host = array.get()
    return host.view(dtype.numpy) if dtype is DType.BF16 else host


def planned_launches(cuda: CudaProgram, storage: dict, sizes: dict[str, int]) -> Callable[[], None]:
    """Every launch at ``sizes``, worked out once (grids from isl, arguments packed): the
    returned call only enqueues the kernels, in order, on the current stream."""
    module = _module(cuda.source)
    planned = []
    # an in scalar is passed by value: its value read once, here (a 0-d device array copied)
    dtypes = {a.name: cuda.program.buffer(a.name).dtype for a in cuda.arguments if a.kind == "scalar"}
    values = {name: scalar_value(_to_host(storage[name], dtype), dtype) for name, dtype in dtypes.items()}
    for launch in launches(cuda, sizes):
        args = []
        for a in launch.kernel.arguments:
            if a.kind == "buffer":
                args.append(storage[a.name])
            elif a.kind == "scalar":
                args.append(values[a.name])
            elif a.kind == "size":
                args.append(np.int32(sizes[a.name]))
            elif a.kind == "first":
                args.append(np.int32(launch.first[a.name]))
            else:
                args.append(np.int32(launch.host[a.name]))
        planned.append((module.get_function(launch.function), launch.grid, launch.kernel.block, tuple(args)))

    def enqueue() -> None:
        for function, grid, block, args in planned:
            function(grid, block, args)

    return enqueue


def launch_all(cuda: CudaProgram, storage: dict, sizes: dict[str, int]) -> None:
    """Launch every kernel in order on the current stream."""
    planned_launches(cuda, storage, sizes)()


def fault_word(cuda: CudaProgram):
    """The module's fault word (``polymap_helpers.cuh``) as a one-element device array."""
    cupy = cupy_module()
    return cupy.ndarray((1,), cupy.int32, memptr=_module(cuda.source).get_global(FAULT_WORD))


# once per source, not per call: the search was 60% of a call's host time (cProfile, H100 run)
_records_faults = lru_cache(maxsize=64)(records_faults)


def run_gpu(cuda: CudaProgram, arrays: dict[str, Any]) -> dict[str, Any]:
    """Run the program on the GPU and return its ``out`` and ``inout`` buffers. A program
    that divides i32 values waits for its kernels, and raises ArgumentError (as the
    reference does) when one divided by zero."""
    storage, sizes, on_device = prepare_gpu(cuda, arrays)
    word = fault_word(cuda) if _records_faults(cuda.source) else None
    if word is not None:
        word.fill(0)
    launch_all(cuda, storage, sizes)
    if word is not None and (seen := int(word.get()[0])) != 0:
        raise fault_error(cuda, seen, sizes)
    outputs = {d.name: storage[d.name] for d in cuda.program.outputs}
    if on_device:
        give = _returned_as_callers(arrays)
        return {name: give(array) for name, array in outputs.items()}
    dtypes = {d.name: d.dtype for d in cuda.program.outputs}
    return {name: _to_host(array, dtypes[name]) for name, array in outputs.items()}


def time_gpu(cuda: CudaProgram, arrays: dict[str, Any], *, repeat: int = 20, warmup: int = 3) -> Timing:
    """The device time of one run of the whole program (all launches), as
    ``polymap.runtime.timing`` measures it: CUDA-graph replays of back-to-back runs, so the
    host's launch work is not counted. Outputs are re-zeroed and inout buffers restored
    before each sample, outside the timed region (the runs inside one sample repeat on the
    buffers they left, which changes their values, not their work)."""
    storage, sizes, _ = prepare_gpu(cuda, arrays)
    outs = [d.name for d in cuda.program.buffers if d.kind is BufferKind.OUT]
    initial = {d.name: storage[d.name].copy() for d in cuda.program.buffers if d.kind is BufferKind.INOUT}

    def restore() -> None:
        for name in outs:
            storage[name].fill(0)
        for name, values in initial.items():
            storage[name][...] = values

    return time_device(
        planned_launches(cuda, storage, sizes), repeat=repeat, warmup=warmup, before_sample=restore
    )
