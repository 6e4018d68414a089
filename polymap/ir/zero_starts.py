"""Notes on updates that read an ``out`` buffer's starting zeros where that is likely a
mistake: ``r[i] max= X[i, j]`` into an ``out r`` that nothing writes first is a row
maximum of at least 0, since an ``out`` buffer starts as zeros (docs/language.md); a
``*=`` or ``/=`` from zero stays 0. The program means exactly that, and the reference and
the kernels agree on it, so this is a note in the report and in ``polymap check``, not an
error. ``+=`` and ``-=`` start from their identity and get none.
"""

from __future__ import annotations

from polymap.ir.nodes import Assign, AssignOp, BufferKind, Program, statement_text
from polymap.ir.walk import statements

# per operator: what a start of 0 does to the result, and the start that would not
_FROM_ZERO = {
    AssignOp.MAX: ("is never below 0", "-inf"),
    AssignOp.MIN: ("is never above 0", "inf"),
    AssignOp.MUL: ("stays 0", "1"),
    AssignOp.DIV: ("stays 0", "its first value"),
}


def zero_start_notes(program: Program) -> tuple[str, ...]:
    """One note per ``out`` buffer that is updated by ``max= min= *= /=`` and never written
    by a plain ``=`` (so every such update's first instance reads the starting zero)."""
    assigns = [ctx.stmt for ctx in statements(program) if isinstance(ctx.stmt, Assign)]
    set_once = {s.buffer for s in assigns if s.op is AssignOp.SET}
    notes: dict[str, str] = {}
    for stmt in assigns:
        if stmt.op not in _FROM_ZERO or stmt.buffer in set_once or stmt.buffer in notes:
            continue
        if program.buffer(stmt.buffer).kind is not BufferKind.OUT:
            continue
        result, start = _FROM_ZERO[stmt.op]
        notes[stmt.buffer] = (
            f"note: '{stmt.buffer}' is an out buffer, which starts as zeros, and nothing writes it before "
            f"{statement_text(stmt)} updates it by {stmt.op.value}: its result {result} (write "
            f"'{stmt.buffer}' = {start} first if that is not meant)"
        )
    return tuple(notes.values())


__all__ = ["zero_start_notes"]
