"""Loop-invariant reads in registers: an element a ``seq`` loop reads but never changes is
loaded once, before the loop.

``Y[m, n] += X[m, k] * ((W[k, n] - zero[n]) * scale[n])`` inside ``seq K k`` reads
``zero[n]`` and ``scale[n]`` on every iteration, although neither element moves with k. The
pass :func:`hold_invariant_reads` rewrites, in the block where the loop stands::

    new zero_held: u8               # a block-local 0-d buffer: one register per thread
    zero_held = zero[n]             # the one load
    new scale_held: f32
    scale_held = scale[n]
    seq K k { ... zero_held ... scale_held ... }

It runs, like the accumulators' promotion (``registers.py``) and right after it, before the
mapping, so that the cost model, the proof and the emitted code all see one load per
element and thread. The backend compiler hoists such loads too where it can prove them
invariant (ptxas did for this program), so without the rewrite the model charged the caches
for 2 x 2^25 loads the machine code never makes, and chose the mapping by that.

When. A ``seq`` loop L inside a kernel (``registers._kernel_loops``: in the thread body of a
band, or strictly inside a serial kernel's top-level statement; no ``par`` loop in L), and a
read ``X[E]`` in an assignment of L (its value or its data-dependent ``if``; an ``anchor``
names the data it reads for staging, and keeps its reads), qualify when X is
a top-level buffer that no statement of the program's top-level statement around L writes
(so no thread of the kernel, nor an earlier statement of the same thread, changes it between
the load and the reads), X is not an ``in`` scalar (a kernel argument already), E has no
gathered index, and E mentions no index of L or of a loop inside L. Loops are tried outermost
first; once an element is held for L, the loops inside L read the register.

Why it is legal. The element does not change while the kernel runs, so loading it before L
gives every read in L the same value; the register has X's type, so the value read from it
is the value read from X (a ``u8`` read is its i32 compute value either way). Where L runs no
iteration, or an ``if`` inside L skips the read, the load is one the program did not make:
it must stay in bounds. So the rewritten program is proved with ``analyze`` (the pipeline's,
under its context) before it is kept: all the loads at once, else one at a time, a load that
makes the proof fail (out of bounds where L is empty, say) dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    Gather,
    Loop,
    New,
    Program,
    Read,
    Stmt,
    index_vars,
    map_values,
    value_reads,
)
from polymap.ir.walk import fresh_name, names_in_use, walk_block
from polymap.poly.model import analyze as analyze_program
from polymap.transform.registers import _all_at_once, _failure, _kernel_loops, renumber_statements

__all__ = ["hold_invariant_reads"]

# A held read: the block positions from the program body down to the loop, and the read
# (buffer and index tuple: a read's source position takes no part in its equality).
_Key = tuple[tuple[int, ...], Read]


def hold_invariant_reads(
    program: Program, *, analyze: Callable[[Program], object] = analyze_program
) -> Program:
    """Load the elements a ``seq`` loop reads but never changes once, before the loop (see
    the module docstring). ``analyze`` proves a program (raising ProgramError otherwise).
    Returns ``program`` itself when nothing qualifies or when ``program`` does not analyze."""
    if _failure(analyze, program) is not None:
        return program
    every = _all_at_once(program, _candidates)
    if not every:
        return program
    held = _rewrite(program, every)
    if _failure(analyze, held) is None:
        return held
    chosen: list[_Key] = []
    rejected: set[_Key] = set()
    while True:  # some load breaks the proof: find which, one at a time
        pending = [k for k in _candidates(program, chosen) if k not in chosen and k not in rejected]
        if not pending:
            break
        trial = chosen + [pending[0]]
        if _failure(analyze, _rewrite(program, trial)) is None:
            chosen = trial
        else:
            rejected.add(pending[0])
    return _rewrite(program, chosen) if chosen else program


def _candidates(program: Program, chosen: list[_Key]) -> list[_Key]:
    """Every (loop, read) that qualifies, outermost loops first, leaving out a read already
    held for a chosen loop around it."""
    buffers = {b.name: b for b in program.buffers if not b.by_value}
    out: list[_Key] = []
    for loop, path, candidate in _kernel_loops(program):
        if not candidate:
            continue
        written = _written(program.body[path[0]])
        for read in _invariant_reads(loop):
            if read.buffer not in buffers or read.buffer in written:
                continue
            if any(r == read and path[: len(p)] == p and path != p for p, r in chosen):
                continue
            out.append((path, read))
    return out


def _written(stmt: Stmt) -> set[str]:
    """The buffers a statement and the statements inside it write."""
    return {s.buffer for s in walk_block((stmt,)) if isinstance(s, Assign)}


def _invariant_reads(loop: Loop) -> list[Read]:
    """The reads of ``loop``'s statements whose element does not move with ``loop`` or the
    loops inside it, each once, in textual order."""
    inner = {s.index for s in walk_block((loop,)) if isinstance(s, Loop)}
    found: list[Read] = []
    for stmt in walk_block(loop.body):
        if not isinstance(stmt, Assign):  # an anchor names the data it reads for staging: kept
            continue
        values = [stmt.value] + ([stmt.predicate] if stmt.predicate is not None else [])
        for value in values:
            for read in value_reads(value):  # a gathered index's source is no value: left as it is
                if any(isinstance(e, Gather) for e in read.indices):
                    continue
                if any(index_vars(e) & inner for e in read.indices):
                    continue
                if read not in found:
                    found.append(read)
    return found


def _rewrite(program: Program, chosen: list[_Key]) -> Program:
    """Apply exactly the loads ``chosen`` and renumber the statements."""
    used = names_in_use(program)
    decls = {b.name: b for b in program.buffers}

    def block(stmts: tuple[Stmt, ...], path: tuple[int, ...]) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for pos, stmt in enumerate(stmts):
            if not isinstance(stmt, Loop):
                out.append(stmt)
                continue
            where = path + (pos,)
            loop = replace(stmt, body=block(stmt.body, where))
            for key_path, read in chosen:
                if key_path != where:
                    continue
                register = fresh_name(f"{read.buffer}_held", used)
                used.add(register)
                decl = decls[read.buffer]
                out.append(New(BufferDecl(register, BufferKind.NEW, decl.dtype, (), stmt.loc)))
                out.append(
                    Assign(
                        "", register, (), AssignOp.SET, Read(read.buffer, read.indices, stmt.loc), stmt.loc
                    )
                )
                loop = replace(loop, body=tuple(_replace_stmt(s, read, register) for s in loop.body))
            out.append(loop)
        return tuple(out)

    return renumber_statements(replace(program, body=block(program.body, ())))


def _replace_stmt(stmt: Stmt, read: Read, register: str) -> Stmt:
    """``stmt`` with every read of ``read``'s element made to ``register``."""
    if isinstance(stmt, Loop):
        return replace(stmt, body=tuple(_replace_stmt(s, read, register) for s in stmt.body))
    if isinstance(stmt, Assign):
        value = _replace_value(stmt.value, read, register)
        predicate = None if stmt.predicate is None else _replace_value(stmt.predicate, read, register)
        return replace(stmt, value=value, predicate=predicate)
    return stmt


def _replace_value(expr, read: Read, register: str):
    def swap(e):
        if e == read:  # (wherever it stands in the text)
            return Read(register, (), e.loc)
        return e

    return map_values(expr, swap)
