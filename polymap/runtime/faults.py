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
from polymap.errors import ArgumentError, BoundsError
from polymap.ir.gather_faults import (
    GATHER_FLAG,
    GATHER_SHIFT,
    MAX_GATHER_ORDINAL,
    gather_error,
    statement_gathers,
)
from polymap.ir.nodes import IConst, index_vars
from polymap.poly.isl_text import evaluate_index

FAULT_WORD = "pm_fault"  # the global's name in the host library and in the CUDA module
I64_FAULT = 1 << 30  # added to the line by an i64 division (PM_FAULT_I64 in the helpers)
__all__ = ["ERROR_FAULT", "FAULT_WORD", "fault_error"]

_STATEMENT_COMMENT = re.compile(r"^\s*(?:\{\s*)?// (\w+): ")


def fault_error(
    cuda: CudaProgram, word: int, sizes: dict[str, int] | None = None
) -> ArgumentError | BoundsError:
    """The error for a nonzero fault word: the statement on that line of the source (``sizes``,
    the run's, put a gathered dimension's extent in numbers)."""
    program = cuda.program
    if word & GATHER_FLAG and not word & I64_FAULT:
        return _gather_fault(cuda, word, sizes or {})
    kind = "i64" if word & I64_FAULT else "i32"
    word &= ~I64_FAULT
    statement = _statement_at(cuda, word)
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


def _gather_fault(cuda: CudaProgram, word: int, sizes: dict[str, int]) -> BoundsError | ArgumentError:
    """The error for a gathered index that ``pm_gather`` found outside its dimension: the
    statement on the recorded line, the read and the position by the ordinal (the last
    ordinal, ``MAX_GATHER_ORDINAL``, stands for every gather of the statement from it on)."""
    ordinal = (word & (GATHER_FLAG - 1)) >> GATHER_SHIFT
    line = word & ((1 << GATHER_SHIFT) - 1)
    statement = _statement_at(cuda, line)
    context = cuda.program.error_context()
    if statement is None:
        return ArgumentError(
            f"program '{cuda.program.name}': a gathered index outside its dimension at run time (recorded at "
            f"line {line} of the emitted code)",
            **context,
        )
    gathers = statement_gathers(statement.stmt)
    if ordinal == MAX_GATHER_ORDINAL and len(gathers) > MAX_GATHER_ORDINAL + 1:
        return BoundsError(
            f"statement {statement.name} ({statement.stmt}): one of its gathered indices from the "
            f"{MAX_GATHER_ORDINAL + 1}th on is outside its dimension at run time",
            loc=statement.stmt.loc,
            **context,
        )
    if ordinal >= len(gathers):  # not a code polymap emitted for this statement: say what is known
        return ArgumentError(
            f"statement {statement.name} ({statement.stmt}): a gathered index outside its dimension at run "
            f"time (gather {ordinal} of {len(gathers)}, recorded at line {line} of the emitted code)",
            loc=statement.stmt.loc,
            **context,
        )
    read, position, gather = gathers[ordinal]
    decl = next(b for b in cuda.program.all_buffers() if b.name == read.buffer)
    extent = decl.shape[position]
    if not isinstance(extent, IConst) and index_vars(extent) <= set(sizes):
        extent = f"{extent} = {evaluate_index(extent, sizes)}"
    return gather_error(statement.stmt, read, position, gather, extent, **context)


def _statement_at(cuda: CudaProgram, line: int):
    """The statement whose emitted text holds ``line``, where that line records faults."""
    lines = cuda.source.splitlines()
    if not (1 <= line <= len(lines) and records_faults(lines[line - 1])):
        return None
    for text in reversed(lines[: line - 1]):
        found = _STATEMENT_COMMENT.match(text)
        if found:
            return next((s for s in cuda.model.statements if s.name == found.group(1)), None)
    return None
