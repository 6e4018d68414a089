"""The launches of a program at concrete sizes, computed in Python: what the emitted
``extern "C"`` launcher does in C, for runtimes that launch kernels themselves (CuPy).
Both walk the kernels in order inside their host loops and take each grid from the same
isl functions (``schedule.kernel.grid_dims``), so they launch the same grid."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import islpy as isl

from polymap.codegen.cuda import CudaProgram
from polymap.codegen.launch import KernelLaunch
from polymap.errors import ArgumentError
from polymap.ir.nodes import Loop
from polymap.poly.isl_text import evaluate_index


@dataclass(frozen=True, slots=True)
class Launch:
    kernel: KernelLaunch
    function: str  # the kernel's function, or its edge blocks' (``KernelLaunch.functions``)
    grid: tuple[int, int, int]  # as launched: a parted axis at most the hardware's limit
    host: dict[str, int]  # host-loop index values by the program's names
    first: dict[str, int]  # a parted axis' first block in this launch, by the axis' letter


def launches(cuda: CudaProgram, sizes: dict[str, int]) -> Iterator[Launch]:
    """Every launch in order, at ``sizes`` (a value for each unbound size)."""
    if not cuda.model.in_context(sizes):
        raise ArgumentError(
            f"sizes {sizes} are outside the context the kernels of '{cuda.program.name}' were proved for "
            f"({cuda.program.sizes_in_words(cuda.mapping.context)})"
        )
    yield from _walk(cuda, list(cuda.launches), (), dict(sizes))


def _walk(
    cuda: CudaProgram, pending: list[KernelLaunch], outer: tuple[Loop, ...], env: dict
) -> Iterator[Launch]:
    depth = len(outer)
    k = 0
    while k < len(pending):
        launch = pending[k]
        host = launch.mapping.kernel.host_loops
        if len(host) == depth:
            # an empty nest launches nothing (as in the C launcher)
            yield from (at for at in _at(cuda, launch, env) if min(at.grid) > 0)
            k += 1
            continue
        loop = host[depth]  # the kernels of this host loop come one after another
        group = []
        while (
            k < len(pending)
            and len(pending[k].mapping.kernel.host_loops) > depth
            and pending[k].mapping.kernel.host_loops[depth] is loop
        ):
            group.append(pending[k])
            k += 1
        for value in range(evaluate_index(loop.extent, env)):
            yield from _walk(cuda, group, outer + (loop,), {**env, loop.index: value})


def _at(cuda: CudaProgram, launch: KernelLaunch, env: dict) -> list[Launch]:
    names = cuda.model.names
    values = {names[p]: env[p] for p in cuda.program.param_names}
    values.update(
        (isl_name, env[loop.index])
        for loop, isl_name in zip(launch.mapping.kernel.host_loops, launch.host_params)
    )
    blocks = tuple(g if isinstance(g, int) else evaluate(g, values) for g in launch.grid)
    if any(b > most for b, most in zip(blocks, launch.most_blocks)):
        raise ArgumentError(
            f"{launch.function}: grid {blocks} exceeds the hardware's grid limits at sizes {env}"
        )
    host = {loop.index: env[loop.index] for loop in launch.mapping.kernel.host_loops}
    # a parted axis launches in parts of at most the hardware's blocks, as the C launcher
    # does, each part every function of the kernel that runs at these sizes
    functions = launch.functions(values)
    return [
        Launch(launch, function, grid, host, first)
        for first, grid in launch.parts(blocks)
        for function in functions
    ]


def evaluate(pa: isl.PwAff, values: dict[str, int]) -> int:
    """A piecewise affine function of parameters at a point (isl names -> values)."""
    space = pa.get_domain_space()
    point = isl.Point.zero(space)
    for k in range(space.dim(isl.dim_type.param)):
        value = isl.Val.int_from_si(pa.get_ctx(), values[space.get_dim_name(isl.dim_type.param, k)])
        point = point.set_coordinate_val(isl.dim_type.param, k, value)
    return int(pa.eval(point).to_python())
