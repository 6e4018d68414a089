"""Faults in the data that the emitted code records instead of trapping.

An integer value division by zero is an error of the data, not of the program: the reference
executor raises an ArgumentError naming the statement. The emitted code divides with
``pm_idiv(a, b, __LINE__)`` (``cuda_templates/polymap_helpers.cuh``), which returns 0 and
records the emitted source line in the fault word ``pm_fault`` instead of trapping (x86's
``idiv`` kills the process with SIGFPE; a GPU silently returns garbage). A runtime clears
the word before a run and reads it after; this module turns a nonzero word into the same
error the reference raises, naming the statement through the comment that the emitter
writes above each statement (``// S0: c[i] = a[i] / b[i]``). An i64 division records its line
with ``I64_FAULT`` added (``PM_FAULT_I64``), so that the error names the type as the
reference's does.
"""

from __future__ import annotations

import re

from polymap.codegen.cexpr import records_faults
from polymap.codegen.cuda import ERROR_FAULT, CudaProgram
from polymap.errors import ArgumentError

FAULT_WORD = "pm_fault"  # the global's name in the host library and in the CUDA module
I64_FAULT = 1 << 30  # added to the line by an i64 division (PM_FAULT_I64 in the helpers)
__all__ = ["ERROR_FAULT", "FAULT_WORD", "fault_error"]

_STATEMENT_COMMENT = re.compile(r"^\s*(?:\{\s*)?// (\w+): ")


def fault_error(cuda: CudaProgram, word: int) -> ArgumentError:
    """The error for a nonzero fault word: the statement on that line of the source."""
    program = cuda.program
    kind = "i64" if word & I64_FAULT else "i32"
    word &= ~I64_FAULT
    lines = cuda.source.splitlines()
    statement = None
    if 1 <= word <= len(lines) and records_faults(lines[word - 1]):
        for line in reversed(lines[: word - 1]):
            found = _STATEMENT_COMMENT.match(line)
            if found:
                statement = next((s for s in cuda.model.statements if s.name == found.group(1)), None)
                break
    if statement is None:  # the line is not one polymap emitted a division on: say what is known
        return ArgumentError(
            f"program '{program.name}': {kind} division by zero at run time (recorded at line {word} of the "
            "emitted code)",
            **program.error_context(),
        )
    return ArgumentError(
        f"statement {statement.name} ({statement.stmt}): {kind} division by zero at run time",
        loc=statement.stmt.loc,
        **program.error_context(),
    )
