"""``polymap.compile`` and ``polymap.optimize`` with ``fuse``: the einsum chain tiled and fused
within an on-chip capacity (``polymap.plan``, docs/fusion.md) before the thread mapping, as
the command line's ``--fuse`` does. Without ``fuse`` they are ``polymap.kernel.compile`` and
``polymap.mapping.solve.optimize`` themselves. (Here, at the top of the package: the planner
sits above the mapping and the pipeline, which it calls.)"""

from __future__ import annotations

from polymap import kernel as _kernel
from polymap.errors import ArgumentError
from polymap.ir.nodes import Program
from polymap.mapping import solve as _solve
from polymap.mapping.result import Mapping
from polymap.targets import GpuTarget, get_target

FUSE_NOTE = """

    With ``fuse`` (``True``: the target's shared memory per block, 48 KiB on an H100; or a
    capacity: elements, ``"8K"``, or bytes, ``"32KiB"``), the program's einsum chain is first
    tiled and fused within it (``polymap.plan.program.fused_program``) and the planned program
    mapped: its inputs and outputs are the program's, ``Mapping.program`` is the planned one.
    A given mapping carries its own program, so ``fuse`` is refused beside one."""


def fused_for(program: Program, fuse, target: str | GpuTarget, mapping: Mapping | None = None) -> Program:
    """The program to map for ``fuse`` (see ``FUSE_NOTE``): as it is for None or False."""
    if fuse is None or fuse is False:
        return program
    if mapping is not None:
        raise ArgumentError(
            "fuse plans the program before a mapping is chosen; a given mapping is of its own program "
            "(pass mapping.program, planned as it was, and no fuse)"
        )
    from polymap.plan.program import fused_program

    capacity = f"{get_target(target).shared_memory_per_block}B" if fuse is True else fuse
    return fused_program(program, capacity)


def compile(
    program: Program,
    mapping: Mapping | None = None,
    target: str | GpuTarget = "h100",
    *,
    fuse=None,
    **options,
):  # noqa: A001 (polymap.compile)
    return _kernel.compile(fused_for(program, fuse, target, mapping), mapping, target, **options)


def optimize(program: Program, target: str | GpuTarget = "h100", *, fuse=None, **options) -> Mapping:
    return _solve.optimize(fused_for(program, fuse, target), target, **options)


compile.__doc__ = (_kernel.compile.__doc__ or "") + FUSE_NOTE
optimize.__doc__ = (_solve.optimize.__doc__ or "") + FUSE_NOTE
