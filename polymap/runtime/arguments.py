"""The arrays a compiled program runs on: checked like the reference executor checks them
(same dtype, shape, sizes inferred from the inputs), then laid out as the emitted code
expects them (contiguous, row-major) next to freshly made outputs and temporaries.

Inputs may be NumPy arrays or device arrays (anything with ``shape``, ``dtype`` and
``__cuda_array_interface__``, e.g. CuPy): a device array is checked through a zero-stride
stand-in of its shape and dtype, so nothing is copied to the host for the check."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from polymap.arrays import is_device_array
from polymap.errors import ArgumentError, InternalError
from polymap.ir.nodes import BufferDecl, DType, IConst, Program, gathers_of
from polymap.ir.walk import statements
from polymap.reference import _as_array, _infer_sizes, _shape, split_sizes

if TYPE_CHECKING:
    from polymap.codegen.cuda import CudaProgram

INT_MAX = 2**31 - 1  # the emitted code indexes with int


@dataclass(frozen=True, slots=True)
class BoundArguments:
    """``buffers``: the declarations of the launcher's buffer arguments, in order;
    ``sizes``: a value for each unbound size of the program; ``shapes``: the concrete shape
    of every buffer in ``buffers``; ``inputs``: the caller's arrays by name (host values as
    the checked NumPy arrays)."""

    buffers: tuple[BufferDecl, ...]
    sizes: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    inputs: dict[str, Any]


def bind_arguments(cuda: CudaProgram, arrays: dict[str, Any]) -> BoundArguments:
    """Check ``arrays`` against the program's inputs and compute every size and the shape
    of every buffer argument of the launcher; raises ArgumentError naming the buffer."""
    program = cuda.program
    every = {d.name: d for d in program.all_buffers()}
    buffers = tuple(every[a.name] for a in cuda.arguments if a.kind in ("buffer", "scalar"))
    ctx = program.error_context()
    inputs = {b.name: b for b in program.inputs}
    arrays, fixed = split_sizes(program, arrays, ctx)
    for name in arrays:
        if name not in inputs:
            known = ", ".join(inputs) or "none"
            sizes = f"; sizes: {', '.join(program.param_names)}" if program.param_names else ""
            raise ArgumentError(
                f"'{name}' is not an input of program '{program.name}' (inputs: {known}{sizes})", **ctx
            )
    for name, decl in inputs.items():
        if name not in arrays:
            raise ArgumentError(f"missing input '{name}' ({decl}) of program '{program.name}'", **ctx)
    views = {name: _as_array(inputs[name], _stand_in(value), ctx) for name, value in arrays.items()}
    sizes = _infer_sizes(program, views, ctx, fixed)
    every_shape = _shapes_at(program, tuple(sizes.items()))
    # the temporaries too: the GPU runtime allocates them (the launcher does, for C++ callers)
    shapes = {d.name: every_shape[d.name] for d in (*buffers, *cuda.scratch)}
    for name, view in views.items():
        if view.shape != shapes[name]:
            raise ArgumentError(
                f"input '{name}' ({inputs[name]}) has the wrong shape: expected {shapes[name]}, got {view.shape}",
                **ctx,
            )
    for name, shape in shapes.items():
        if int(np.prod(shape, dtype=np.int64)) > INT_MAX:
            raise ArgumentError(
                f"buffer '{name}' has {int(np.prod(shape, dtype=np.int64))} elements at these sizes; the emitted "
                f"code indexes with 32-bit int (at most {INT_MAX} elements)",
                **ctx,
            )
    # host values as checked NumPy arrays (a DLPack producer or a Python number read once);
    # device arrays as given (their views above are stand-ins of their shape and dtype)
    given = {name: value if is_device_array(value) else views[name] for name, value in arrays.items()}
    return BoundArguments(buffers, sizes, shapes, given)


def scalar_value(value: np.ndarray, dtype: DType) -> np.generic:
    """An ``in`` scalar's value (a 0-d host array of ``dtype``) as the C type the kernels take
    it by value in (``codegen.cexpr.C_TYPE``): 16-bit floats as their bits, bool as a byte."""
    stored = {DType.F16: np.uint16, DType.BF16: np.uint16, DType.BOOL: np.uint8}.get(dtype)
    array = np.array(value, dtype=dtype.numpy).reshape(())  # one element, a copy
    return (array.view(stored) if stored is not None else array)[()]


@lru_cache(maxsize=256)
def _shapes_at(program: Program, sizes: tuple[tuple[str, int], ...]) -> dict[str, tuple[int, ...]]:
    """Every buffer's shape at ``sizes``, once per program and sizes: binding validates the
    whole program, which a kernel called in a loop at the same sizes need not pay each time.
    (Callers copy out of the returned dict, never into it.)"""
    bound = program.bind(**dict(sizes))
    ctx = program.error_context()
    return {d.name: _shape(d, ctx) for d in bound.all_buffers()}


def _stand_in(value: Any) -> Any:
    if not is_device_array(value):
        return value
    shape, dtype = tuple(value.shape), np.dtype(value.dtype)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))


def random_inputs(program: Program, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for every in and inout buffer at ``sizes`` (values for the program's
    sizes; other names are ignored): standard normal for floats, integers in [1, 5] for the
    integer types (never 0, so an integer division in the program cannot trap), 0 or 1 for
    bool. An integer buffer that gathered indices are read from (``E[ids[t], d]``) gets
    values in [0, the smallest dimension it indexes), so that every gather is in bounds."""
    rng = np.random.default_rng(seed)
    inputs = {}
    bound = program.bind(**{k: v for k, v in sizes.items() if k in program.param_names})
    indexed = _indexed_extents(bound)
    for decl in bound.inputs:
        if not all(isinstance(e, IConst) for e in decl.shape):  # pragma: no cover - bind folds every size
            raise InternalError(f"shape of '{decl.name}' is not constant after binding every size: {decl}")
        shape = tuple(max(e.value, 0) for e in decl.shape)
        if decl.dtype.is_float:
            inputs[decl.name] = rng.standard_normal(shape).astype(decl.dtype.numpy)
        elif decl.name in indexed:  # below the dimension and the type's largest value
            largest = 1 if decl.dtype is DType.BOOL else int(np.iinfo(decl.dtype.numpy).max)
            high = max(1, min(indexed[decl.name], largest + 1))
            inputs[decl.name] = rng.integers(0, high, size=shape).astype(decl.dtype.numpy)
        elif decl.dtype is DType.BOOL:
            inputs[decl.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            inputs[decl.name] = rng.integers(1, 6, size=shape).astype(decl.dtype.numpy)
    return inputs


def _indexed_extents(program: Program) -> dict[str, int]:
    """Per buffer that gathered indices are read from, the smallest extent they index."""
    shapes = {d.name: d.shape for d in program.all_buffers()}
    found: dict[str, int] = {}
    for ctx in statements(program):
        for read in ctx.stmt.reads():
            for k, g in gathers_of(read):
                extent = shapes[read.buffer][k]
                if isinstance(extent, IConst):
                    found[g.source.buffer] = min(found.get(g.source.buffer, extent.value), extent.value)
    return found
