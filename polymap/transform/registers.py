"""Register promotion: a reduction keeps its accumulator in a register, not in global memory.

``C[i, j] += A[i, k] * B[k, j]`` inside ``seq K k`` reads and writes ``C[i, j]`` in global
memory on every iteration of k, although the element never changes within the loop. The
pass :func:`promote_accumulators` rewrites, inside the body of each kernel::

    seq K k { ... C[i, j] ... }

into (in the block where the loop stands)::

    new C_acc: f32                  # a block-local 0-d buffer: one register per thread
    C_acc = C[i, j]                 # load
    seq K k { ... C_acc ... }       # every C[i, j] of the loop replaced
    C[i, j] = C_acc                 # store back

Where the statement right before the loop stores into the element a value that does not read
it (``C[i, j] = 0``), the register starts at that value and the store goes (``C_acc = 0``):
the store after the loop writes the element in its place, also where the loop runs no
iteration, so a global store and load per element are saved.

It runs before code generation so that the program the cost model and the polyhedral
proof see is exactly what the emitted code does (one load and one store per reduction,
a 0-d local the code generator keeps in a register), instead of an optimization the
backend would make behind their back.

When. A ``seq`` loop L and a buffer X, top-level (``in``/``out``/``inout``/program-wide
``new``) or a block-local array (a fused chain's band tile, which a block's lanes share in
shared memory; a block-local scalar is a register already), qualify when L is inside a kernel (in
the thread body of a band of ``par`` loops, or strictly inside a serial kernel's top-level
statement: the load and store must not become kernels of their own), L contains no
``par`` loop, some statement in L writes X, every access to X in L (reads, update reads,
writes) has one and the same index tuple E, and E mentions no index of L or of a loop
inside L (only sizes and indices of the loops around L). Loops are tried outermost first;
a loop that does not qualify leaves its inner loops as candidates, and once X lives in a
register for L it is not promoted again inside L.

Why it is legal. The input is race free (proved by ``analyze``), so no other thread
touches X[E] while this thread runs L unless it did so in the original too; E is the same
element on every iteration of L (it mentions only indices fixed for the whole loop); and
distinct TE buffers never alias, while condition 2 rules out a second, structurally
different index of X that might denote the same element. So within L the element behaves
as a private scalar: loading it before L, working on the copy and storing it after gives
every statement the same values in the same order, bit for bit (the copy has X's dtype).

Zero starts. Where X is an ``out`` buffer (it starts as zeros) and the load reads, at every
instance, the element as the launch found it (isl's dataflow analysis on the rewritten
program: no write of X comes before it; ``_zero_starts``), the register starts
at ``0`` instead: the same value, and no global load. A reduction ``C[i, j] += ...`` into an
``out C`` then never reads ``C``; an ``inout`` buffer, or an ``out`` one an earlier kernel or
an earlier run of a host loop wrote, keeps its load.

Zero-iteration loops. Where L runs no iteration (a triangular extent such as ``seq i k``
at i = 0) the load and store still run: harmless for the value (the element is written
back unchanged), but the store is a write the original did not make, which can race with
another thread that does write X[E] (``par 2 p { seq p k { y[0] += x[k] } }``: only p = 1
wrote y[0]), or reach an element out of bounds. Therefore the rewritten program is proved
with ``polymap.poly.model.analyze`` (symbolically where sizes are unbound) before it is
kept. First every promotion is applied at once (outermost loops first, as below) and the
result analyzed: where that holds, one analysis proves it, and it is the program the caller
analyzes next anyway. Where it does not, the promotions are tried one at a time on the
program built so far; a promotion that makes it raise (RaceError, BoundsError, any
ProgramError) is dropped and the loops inside stay candidates. A program that does not
analyze to begin with is returned unchanged.

``analyze`` (keyword) is the function that proves a program: the pipeline passes its memo
of models, so that a program analyzed here is not analyzed again downstream.

Statements are renumbered S0, S1, ... in textual order afterwards (the invariant
``walk.statements`` and the model rely on); the load and store carry the loop's ``loc``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from polymap.errors import ProgramError, UninitializedReadError
from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    Const,
    Gather,
    IndexExpr,
    Loop,
    New,
    Program,
    Read,
    Stmt,
    ValueExpr,
    index_vars,
    map_values,
    operand_reads,
    reads_of,
)
from polymap.ir.walk import fresh_name, names_in_use, walk_block
from polymap.poly.deps import DepKind
from polymap.poly.model import PolyModel
from polymap.poly.model import analyze as analyze_program

__all__ = ["promote_accumulators", "renumber_statements"]

# A promotion: the block positions from the program body down to the loop, and the buffer.
_Key = tuple[tuple[int, ...], str]


def promote_accumulators(
    program: Program, *, analyze: Callable[[Program], object] = analyze_program
) -> Program:
    """Keep reduction accumulators in registers (see the module docstring).

    ``analyze`` proves a program (raising ProgramError otherwise); by default
    ``polymap.poly.model.analyze`` without a context. Returns ``program`` itself when
    nothing qualifies or when ``program`` does not analyze (race, bounds or affinity errors
    are the caller's to report)."""
    if _failure(analyze, program) is not None:
        return program
    chosen, unloaded = _promotions(program, analyze)
    if not chosen:
        return program
    registers: dict[_Key, str] = {}
    promoted = _rewrite(program, chosen, unloaded, registers=registers)
    zeroed = _zero_starts(program, promoted, registers, analyze)
    return _rewrite(program, chosen, unloaded, zeroed) if zeroed else promoted


def _promotions(program: Program, analyze: Callable[[Program], object]) -> tuple[list[_Key], set[_Key]]:
    """The promotions to make, and those of them made without the load (see the module
    docstring); ``program`` analyzes."""
    optimistic = _all_at_once(program)
    if optimistic and _failure(analyze, _rewrite(program, optimistic)) is None:
        return optimistic, set()
    # some promotion breaks the proof: find which, one at a time
    chosen: list[_Key] = []
    rejected: set[_Key] = set()
    unloaded: set[_Key] = set()
    temporaries = {b.name for b in program.buffers if b.kind is BufferKind.NEW}
    while True:
        pending = [k for k in _candidates(program, chosen) if k not in chosen and k not in rejected]
        if not pending:
            break
        key = pending[0]
        failure = _failure(analyze, _rewrite(program, chosen + [key], unloaded))
        if failure is None:
            chosen.append(key)
        elif (
            # the load reads a temporary's element that nothing wrote: the program never
            # used that value (it analyzed), so the register starts undefined as the element
            # did, and the result must analyze without the load
            isinstance(failure, UninitializedReadError)
            and key[1] in temporaries
            and _failure(analyze, _rewrite(program, chosen + [key], unloaded | {key})) is None
        ):
            chosen.append(key)
            unloaded.add(key)
        else:
            rejected.add(key)
    return chosen, unloaded


def _zero_starts(
    program: Program, promoted: Program, registers: dict[_Key, str], analyze: Callable[[Program], object]
) -> set[_Key]:
    """The promotions of an ``out`` buffer whose load reads, at every instance, the element
    as the launch found it: isl's flow dependences of ``promoted`` (every write of the
    program a may source, so any write before it is one) have no source for it. An ``out``
    buffer starts as zeros, so the register starts at 0 and the load goes. ``registers``:
    each promotion's register in ``promoted``."""
    outs = {b.name for b in program.buffers if b.kind is BufferKind.OUT}
    wanted = {register: key for key, register in registers.items() if key[1] in outs}
    if not wanted:
        return set()
    model = analyze(promoted)
    if not isinstance(model, PolyModel):
        return set()
    loads = {  # the load (inside the loop the register reads itself, not the buffer)
        s.name: wanted[s.stmt.buffer]
        for s in model.statements
        if isinstance(s.stmt, Assign)
        and s.stmt.buffer in wanted
        and isinstance(s.stmt.value, Read)
        and s.stmt.value.buffer == wanted[s.stmt.buffer][1]
    }
    fed = {
        d.sink
        for d in model.dependences.items
        if d.kind is DepKind.FLOW and d.sink in loads and d.buffer == loads[d.sink][1]
    }
    return {key for name, key in loads.items() if name not in fed}


def _all_at_once(program: Program, candidates=None) -> list:
    """The promotions the one-at-a-time search makes when every trial is proved: the same
    order, so that where the whole rewrite analyzes, the result is the one it would give.
    ``candidates(program, chosen)`` lists them (``_candidates``; ``invariant_reads``' own)."""
    candidates = _candidates if candidates is None else candidates
    chosen: list = []
    while True:
        pending = [k for k in candidates(program, chosen) if k not in chosen]
        if not pending:
            return chosen
        chosen.append(pending[0])


def renumber_statements(program: Program) -> Program:
    """Rename every Assign and Anchor S0, S1, ... in textual order."""
    count = 0

    def block(stmts: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        nonlocal count
        out: list[Stmt] = []
        for stmt in stmts:
            if isinstance(stmt, (Assign, Anchor)):
                stmt = replace(stmt, name=f"S{count}")
                count += 1
            elif isinstance(stmt, Loop):
                stmt = replace(stmt, body=block(stmt.body))
            out.append(stmt)
        return tuple(out)

    return replace(program, body=block(program.body))


# ------------------------------------------------------------------- candidates


def _has_par(stmt: Stmt) -> bool:
    return isinstance(stmt, Loop) and (stmt.is_par or any(_has_par(s) for s in stmt.body))


def _kernel_loops(program: Program):
    """Every loop with its path, and whether it may be promoted: a seq loop without par
    loops inside a kernel (not a host loop, not a serial kernel's top-level statement).
    Yields (loop, path, candidate) in textual order, outer loops first."""

    def visit(block: tuple[Stmt, ...], path: tuple[int, ...], in_kernel: bool):
        for pos, stmt in enumerate(block):
            if isinstance(stmt, Loop):
                where = path + (pos,)
                flat = not _has_par(stmt)
                yield stmt, where, in_kernel and flat
                # Below a par loop, or inside a serial kernel, is thread code.
                yield from visit(stmt.body, where, in_kernel or stmt.is_par or flat)

    yield from visit(program.body, (), False)


def _accesses(stmts: tuple[Stmt, ...], buffer: str) -> tuple[list[tuple[IndexExpr, ...]], bool, set[str]]:
    """The index tuples of every access to ``buffer`` in ``stmts``, whether one writes it,
    and the indices of the loops among ``stmts``."""
    found: list[tuple[IndexExpr, ...]] = []
    written = False
    indices: set[str] = set()

    def visit(block: tuple[Stmt, ...]) -> None:
        nonlocal written
        for stmt in block:
            if isinstance(stmt, Loop):
                indices.add(stmt.index)
                visit(stmt.body)
            elif isinstance(stmt, (Assign, Anchor)):
                touched = [r.indices for r in operand_reads(stmt) if r.buffer == buffer]
                if isinstance(stmt, Assign) and stmt.buffer == buffer:
                    touched.append(stmt.indices)
                    written = True
                if touched and stmt.guard is not None:
                    # under an if: the element is not touched in every iteration, so a
                    # register's load and store around the loop would add accesses
                    touched.append(None)
                found.extend(touched)

    visit(stmts)
    return found, written, indices


def _element(loop: Loop, buffer: str, before: Stmt | None) -> tuple[IndexExpr, ...] | None:
    """The one element of ``buffer`` that ``loop`` works on, if it qualifies; ``before``:
    the statement right before the loop in its block. An access under an if (the element
    not touched in every iteration) qualifies only where ``before`` stores the element
    (``_sets``): the register's store after the loop then writes an element the program
    writes there anyway, and the load goes."""
    found, written, indices = _accesses((loop,), buffer)
    element = next((e for e in found if e is not None), None)
    if not written or element is None or any(e is not None and e != element for e in found):
        return None
    if None in found and not _sets(before, buffer, element):
        return None
    if any(isinstance(s, Assign) and s.buffer == buffer and s.is_atomic for s in walk_block((loop,))):
        return None  # other threads update the element too (a scatter's, or one written atomic)
    if any(index_vars(e) & indices for e in element):
        return None
    return element


def _candidates(program: Program, chosen: list[_Key]) -> list[_Key]:
    """Every (loop, buffer) that qualifies, outermost loops first, leaving out a buffer
    already promoted by a chosen loop around it."""
    out: list[_Key] = []
    buffers = _promotable(program)
    for loop, path, candidate in _kernel_loops(program):
        if not candidate:
            continue
        before = _statement_before(program, path)
        for decl in buffers:
            taken = any(b == decl.name and path[: len(p)] == p and path != p for p, b in chosen)
            if not taken and _element(loop, decl.name, before) is not None:
                out.append((path, decl.name))
    return out


def _promotable(program: Program) -> tuple[BufferDecl, ...]:
    """The buffers whose elements a register may hold across a loop: the top-level ones,
    and the block-local arrays (a fused chain's band tile, which a block's lanes share in
    shared memory); a block-local scalar is a register already."""
    return program.buffers + tuple(b for b in program.all_buffers()[len(program.buffers) :] if b.shape)


def _statement_before(program: Program, path: tuple[int, ...]) -> Stmt | None:
    """The statement right before the one at ``path`` in its block (None for the first)."""
    block = program.body
    for pos in path[:-1]:
        block = block[pos].body
    return block[path[-1] - 1] if path[-1] > 0 else None


# ---------------------------------------------------------------------- rewrite


def _failure(analyze: Callable[[Program], object], program: Program) -> ProgramError | None:
    """Why ``program`` does not analyze, or None where it does."""
    try:
        analyze(program)
    except ProgramError as error:
        return error
    return None


def _rewrite(
    program: Program,
    chosen: list[_Key],
    unloaded: set[_Key] | frozenset = frozenset(),
    zeroed: set[_Key] | frozenset = frozenset(),
    *,
    registers: dict[_Key, str] | None = None,
) -> Program:
    """Apply exactly the promotions ``chosen`` and renumber the statements; those of
    ``unloaded`` (a temporary's element that nothing wrote before the loop) without the
    load: their register starts undefined, as the element did; those of ``zeroed`` (an
    ``out`` buffer's element nothing wrote before the loop) from 0, the element's start.
    ``registers``, where given, gets each promotion's register."""
    used = names_in_use(program)
    decls = {b.name: b for b in _promotable(program)}

    def fresh(buffer: str) -> str:
        name = fresh_name(f"{buffer}_acc", used)
        used.add(name)
        return name

    def block(stmts: tuple[Stmt, ...], path: tuple[int, ...]) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for pos, stmt in enumerate(stmts):
            if not isinstance(stmt, Loop):
                out.append(stmt)
                continue
            where = path + (pos,)
            loop = replace(stmt, body=block(stmt.body, where))
            promoted = [decls[b] for b in decls if (where, b) in chosen]
            loads, stores = [], []
            for decl in promoted:
                element = _element(stmt, decl.name, stmts[pos - 1] if pos > 0 else None)
                register = fresh(decl.name)
                if registers is not None:
                    registers[where, decl.name] = register
                loop = replace(loop, body=tuple(_replace_stmt(s, decl.name, register) for s in loop.body))
                first = Read(decl.name, element, stmt.loc)
                if (where, decl.name) in zeroed:
                    first = Const(0, stmt.loc)  # what the load would read (``_zero_starts``)
                if _sets(out[-1] if out else None, decl.name, element):
                    # ``X[E] = v`` right before the loop: the register starts at v, and the
                    # store back after the loop writes X[E] in its place
                    first = out.pop().value
                out.append(New(BufferDecl(register, BufferKind.NEW, decl.dtype, (), stmt.loc)))
                if (where, decl.name) not in unloaded:
                    loads.append(Assign("", register, (), AssignOp.SET, first, stmt.loc))
                stores.append(
                    Assign("", decl.name, element, AssignOp.SET, Read(register, (), stmt.loc), stmt.loc)
                )
            out.extend(loads)
            out.append(loop)
            out.extend(stores)
        return tuple(out)

    return renumber_statements(replace(program, body=block(program.body, ())))


def _sets(stmt: Stmt | None, buffer: str, element: tuple[IndexExpr, ...]) -> bool:
    """Whether ``stmt`` is ``buffer[element] = v`` with a ``v`` that does not read ``buffer``:
    a store the promotion's load would only read back (``C[i, j] = 0`` before a reduction).
    The register then starts at ``v`` (cast to the buffer's type, as the store would), and
    the store after the loop, which runs even where the loop runs no iteration, leaves
    ``buffer[element]`` with the value the two stores gave it."""
    return (
        isinstance(stmt, Assign)
        and stmt.guard is None
        and stmt.predicate is None
        and stmt.buffer == buffer
        and stmt.indices == element
        and stmt.op is AssignOp.SET
        and all(r.buffer != buffer for r in reads_of(stmt.value))
    )


def _replace_stmt(stmt: Stmt, buffer: str, register: str) -> Stmt:
    """``stmt`` with every access to ``buffer`` (all to one element) made to ``register``."""
    if isinstance(stmt, Loop):
        return replace(stmt, body=tuple(_replace_stmt(s, buffer, register) for s in stmt.body))
    if isinstance(stmt, (Assign, Anchor)):
        value = _replace_value(stmt.value, buffer, register)
        predicate = None if stmt.predicate is None else _replace_value(stmt.predicate, buffer, register)
        if isinstance(stmt, Assign) and stmt.buffer == buffer:
            return replace(stmt, buffer=register, indices=(), value=value, predicate=predicate)
        return replace(stmt, value=value, predicate=predicate)
    return stmt


def _replace_value(expr: ValueExpr, buffer: str, register: str) -> ValueExpr:
    def read(e: Read) -> Read:
        if e.buffer == buffer:
            return Read(register, (), e.loc)
        # a gathered index read from the buffer reads the register too (``A[X[i]]``)
        return replace(
            e, indices=tuple(Gather(read(i.source)) if isinstance(i, Gather) else i for i in e.indices)
        )

    return map_values(expr, lambda e: read(e) if isinstance(e, Read) else e)
