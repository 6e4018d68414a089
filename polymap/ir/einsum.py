"""Einsum shorthand: index names that no loop binds become implicit loops.

``C[m, n] += A[m, k] * B[k, n]`` at a point where none of m, n, k is bound means::

    par M m { par N n { seq K k { C[m, n] += A[m, k] * B[k, n] } } }

Names on the left become ``par`` loops (in order of appearance, outermost first), names
only on the right become ``seq`` loops inside them (a reduction, so the operator must
accumulate: ``+=``, ``max=``...; plain ``=`` would keep only the last term). The extent of
each implicit index is the declared extent of every buffer dimension it indexes alone
(``A[m, k]`` gives m the first extent of A); all such extents must agree.
"""

from __future__ import annotations

from collections.abc import Callable

from polymap.errors import ProgramError, ShapeError, UndeclaredError
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferDecl,
    IndexExpr,
    IVar,
    Loop,
    LoopKind,
    Read,
    index_vars,
    reads_of,
)


def implicit_loops(
    stmt: Assign,
    par_names: list[str],
    seq_names: list[str],
    buffers: dict[str, BufferDecl],
    *,
    error: Callable[..., Exception],
) -> Loop:
    """Wrap ``stmt`` in the implicit loops of its unbound index names."""
    accesses = (stmt.target,) + reads_of(stmt.value)
    indexing = set().union(*(index_vars(i) for a in accesses for i in a.indices))
    for name in par_names + seq_names:
        if name not in indexing:
            raise error(UndeclaredError, f"{stmt.name} `{stmt}`: unknown name '{name}'", stmt.loc)
    extents = {name: _extent(name, stmt, accesses, buffers, error) for name in par_names + seq_names}
    if seq_names and stmt.op is AssignOp.SET:
        names = ", ".join(f"'{n}'" for n in seq_names)
        raise error(
            ProgramError,
            f"{stmt.name} `{stmt}`: index {names} appears only on the right of '=', which would keep only "
            f"one term; use '+=' (or max=, min=, *=) to reduce over it",
            stmt.loc,
        )
    nest: Assign | Loop = stmt
    for kind, names in ((LoopKind.SEQ, seq_names), (LoopKind.PAR, par_names)):
        for name in reversed(names):
            nest = Loop(kind, name, extents[name], (nest,), stmt.loc)
    return nest


def _extent(
    name: str,
    stmt: Assign,
    accesses: tuple[Read, ...],
    buffers: dict[str, BufferDecl],
    error: Callable[..., Exception],
) -> IndexExpr:
    found: list[tuple[IndexExpr, Read]] = []
    for access in accesses:
        shape = buffers[access.buffer].shape
        for position, index in enumerate(access.indices):
            if index == IVar(name) and position < len(shape):
                found.append((shape[position], access))
    if not found:
        raise error(
            ShapeError,
            f"{stmt.name} `{stmt}`: cannot infer the extent of implicit index '{name}': it never indexes a "
            f"buffer dimension on its own (bind it with a loop, or declare it as a size)",
            stmt.loc,
        )
    extent, first = found[0]
    for other, access in found[1:]:
        if other != extent:
            raise error(
                ShapeError,
                f"{stmt.name} `{stmt}`: implicit index '{name}' ranges over {extent} in {first} "
                f"(buffer '{first.buffer}') but over {other} in {access} (buffer '{access.buffer}')",
                access.loc or stmt.loc,
            )
    return extent
