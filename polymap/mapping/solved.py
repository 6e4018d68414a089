"""Kernels solved once per pipeline run: the same kernel in another program is not solved
again.

The pipeline maps several rewrites of one program (each option of a split reduction, each
choice of a deep band's axes), and most of their kernels are the kernels of the program as
written: a split renumbers the statements (S0, S1, ... in textual order) and the kernels
(kernel0, kernel1, ...), but leaves every other nest as it was. A kernel's SCIP problem is a
function of what ``KernelProblem.build`` reads: the kernel's loops and statements, the
declarations of the buffers they touch (bound, and as written: the copies' widths), the
pins that name its loops, the loops its lanes may spread, the target and the options. The
key below holds all of that with the statement names left out (a spread loop names its
statements by their order in the kernel instead), so two kernels with equal keys have the
same problem, and SCIP's decisions and report for one are those of the other. A hit moves
the decisions to the new kernel and costs them there (``KernelProblem.cost``: the table's
statement names are the new program's).
"""

from __future__ import annotations

from dataclasses import replace

from polymap.ir.nodes import Anchor, Assign, Loop, New, Program, Stmt
from polymap.ir.walk import walk_block
from polymap.mapping.space import Kernel, Pins, SpreadLoop


def kernel_key(
    kernel: Kernel,
    bound: Program,
    written: Program | None,
    written_kernel: Kernel | None,
    pins: Pins,
    spread: tuple[SpreadLoop, ...] | None,
    options: tuple,
) -> tuple:
    """What a kernel's problem depends on, statement names aside (see the module docstring);
    ``options``: the target and the solve's options, as a tuple."""
    statements = [s.name for s in walk_block(_top(kernel)) if isinstance(s, (Assign, Anchor))]
    order = {name: k for k, name in enumerate(statements)}
    loops = {s.index for s in walk_block(_top(kernel)) if isinstance(s, Loop)}
    loops |= {loop.index for loop in kernel.host_loops}
    pinned = tuple(
        (key.rpartition(".")[2], pin)
        for key, pin in pins.by_key
        if key in loops or (key.startswith(f"{kernel.name}.") and key.rpartition(".")[2] in loops)
    )
    lanes = tuple(replace(sp, statements=tuple(order[n] for n in sp.statements)) for sp in spread or ())
    return (
        _unnamed_block(kernel.host_loops),
        _unnamed_block(_top(kernel)),
        _declarations(kernel, bound),
        None if written_kernel is None else _unnamed_block(_top(written_kernel)),
        None if written is None or written_kernel is None else _declarations(written_kernel, written),
        pinned,
        lanes,
        options,
    )


def _top(kernel: Kernel) -> tuple[Stmt, ...]:
    """The kernel's nest: its band (the outermost band loop holds everything) or its body."""
    return (kernel.band[0],) if kernel.band else kernel.body


def _unnamed_block(block: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    return tuple(_unnamed(s) for s in block)


def _unnamed(stmt: Stmt) -> Stmt:
    if isinstance(stmt, (Assign, Anchor)):
        return replace(stmt, name="")
    if isinstance(stmt, Loop):
        return replace(stmt, body=_unnamed_block(stmt.body))
    return stmt


def _declarations(kernel: Kernel, program: Program) -> tuple:
    """The declarations of the program-wide buffers the kernel touches, by name."""
    names = set()
    for stmt in walk_block(_top(kernel)):
        if isinstance(stmt, Assign):
            names.add(stmt.buffer)
        if isinstance(stmt, (Assign, Anchor)):
            names |= {r.buffer for r in stmt.reads()}
    local = {s.decl.name for s in walk_block(_top(kernel)) if isinstance(s, New)}
    return tuple(d for d in program.buffers if d.name in names - local)
