"""Atomic updates: scatters (``O[I[i]] += x``: updates through an index read from a buffer)
and updates written ``atomic`` (``atomic s[0] += x``), which the GPU makes as atomic
operations (``cuda_templates/polymap_helpers.cuh``: ``pm_atomic_add`` and its kind).
Instances that meet on an element commute: integers give one result in any order, floats
one result up to the order of rounding, which varies from run to run. A program with a
float atomic update is therefore mapped only when its user allows that
(``deterministic=False``, ``--nondeterministic``), as a GPU library's atomics are."""

from __future__ import annotations

from polymap.errors import ProgramError
from polymap.ir.nodes import Assign, AssignOp, Program
from polymap.ir.walk import walk_block


def atomic_updates(program: Program) -> tuple[Assign, ...]:
    """The program's atomic updates (scatters, and statements written ``atomic``), in
    textual order."""
    return tuple(s for s in walk_block(program.body) if isinstance(s, Assign) and s.is_atomic)


def rounds(program: Program, stmt: Assign) -> bool:
    """Whether the result of ``stmt``'s atomic updates depends on their order (a float
    target)."""
    return not program.buffer(stmt.buffer).dtype.is_integer


def check_determinism(program: Program, deterministic: bool) -> None:
    """Refuse a float atomic update unless ``deterministic`` is off, naming the statement."""
    if not deterministic:
        return
    stmt = next((s for s in atomic_updates(program) if rounds(program, s)), None)
    if stmt is None:
        return
    differs = (
        "a float sum rounds differently in each"
        if stmt.op in (AssignOp.ADD, AssignOp.SUB)
        else "the sign of a zero and which NaN is kept follow that order"
    )
    how = "through an index read from a buffer (a scatter)" if stmt.is_scatter else "atomically"
    raise ProgramError(
        f"{stmt.name} `{stmt}` updates the float buffer '{stmt.buffer}' {how}: its atomic updates meet in "
        f"an order that varies from run to run, and {differs}; pass deterministic=False "
        "(--nondeterministic) to allow it, or write the update to an integer buffer",
        loc=stmt.loc,
        **program.error_context(),
    )


def atomic_lines(program: Program) -> tuple[str, ...]:
    """The report's lines on the program's atomic updates: which update runs as an atomic,
    and whether its result may vary from run to run."""
    return tuple(
        f"atomic updates: {stmt.name} `{stmt}`: each instance updates '{stmt.buffer}' atomically; "
        + (
            "its float result varies with their order from run to run (deterministic=False)"
            if rounds(program, stmt)
            else "in any order, one result"
        )
        for stmt in atomic_updates(program)
    )
