"""Scatters (``O[I[i]] += x``: updates through an index read from a buffer) and updates
written ``atomic`` (``atomic s[0] += x``), which the GPU makes as atomic operations
(``cuda_templates/polymap_helpers.cuh``: ``pm_atomic_add`` and its kind). Instances that meet on an element commute: integers give one result in any
order, floats one result up to the order of rounding, which varies from run to run. A
program with a float scatter is therefore mapped only when its user allows that
(``deterministic=False``, ``--nondeterministic``), as a GPU library's atomics are."""

from __future__ import annotations

from polymap.errors import ProgramError
from polymap.ir.nodes import Assign, AssignOp, Program
from polymap.ir.walk import walk_block


def scatters(program: Program) -> tuple[Assign, ...]:
    """The program's atomic updates (scatters, and statements written ``atomic``), in
    textual order."""
    return tuple(s for s in walk_block(program.body) if isinstance(s, Assign) and s.is_atomic)


def float_scatters(program: Program) -> tuple[Assign, ...]:
    """The scatters whose updates round (a float target): their result depends on the order
    in which the GPU applies them."""
    return tuple(s for s in scatters(program) if not program.buffer(s.buffer).dtype.is_integer)


def check_determinism(program: Program, deterministic: bool) -> None:
    """Refuse a float scatter unless ``deterministic`` is off, naming the statement."""
    if not deterministic and scatters(program):
        return
    found = float_scatters(program)
    if deterministic and found:
        stmt = found[0]
        differs = (
            "a float sum rounds differently in each"
            if stmt.op in (AssignOp.ADD, AssignOp.SUB)
            else "the sign of a zero and which NaN is kept follow that order"
        )
        raise ProgramError(
            f"{stmt.name} `{stmt}` updates the float buffer '{stmt.buffer}' "
            f"{'through an index read from a buffer (a scatter)' if stmt.is_scatter else 'atomically'}: its atomic updates meet in an order that varies from run to run, and "
            f"{differs}; pass deterministic=False (--nondeterministic) to allow it, or write the update "
            "to an integer buffer",
            loc=stmt.loc,
            **program.error_context(),
        )


def atomic_lines(program: Program) -> tuple[str, ...]:
    """The report's lines on the program's scatters: which update runs as an atomic, and
    whether its result may vary from run to run."""
    lines = []
    for stmt in scatters(program):
        rounding = not program.buffer(stmt.buffer).dtype.is_integer
        order = (
            "its float result varies with their order from run to run (deterministic=False)"
            if rounding
            else "in any order, one result"
        )
        lines.append(
            f"atomic updates: {stmt.name} `{stmt}`: each instance updates '{stmt.buffer}' atomically; {order}"
        )
    return tuple(lines)
