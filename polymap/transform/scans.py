"""A select scan rewritten as reductions that are exact in any order.

The argmax idiom moves a position by a select on a comparison with the running maximum,
and updates that maximum beside it::

    par M i {
      new mx: f32
      mx = -inf
      best[i] = 0
      seq N j {
        best[i] = select(X[i, j] > mx, j, best[i])     # P = select(E > M, j, P)
        mx max= X[i, j]                                 # M max= E
      }
    }

No order but the program's gives ``best``: the select reads the maximum of the iterations
before it, so the loop runs in one thread per row (4096 threads fill 1.5% of an H100). The
same result is the outcome of three reductions, each a ``min=`` or ``max=`` (exact in any
order, so the lanes of a warp or a block may share them; ``mapping.lanes``)::

    new best_nan_at: i32                                  # only where E is a float
    best_nan_at = N
    seq N j { best_nan_at min= select(X[i, j] != X[i, j], j, N) }
    new mx_upto: f32
    mx_upto = mx
    seq N j { mx_upto max= select(j < best_nan_at, X[i, j], mx) }
    new best_at: i32
    best_at = N
    seq N j { best_at min= select(j < best_nan_at and X[i, j] == mx_upto and X[i, j] > mx, j, N) }
    best[i] = select(best_at < N, best_at, best[i])
    seq N j { mx max= X[i, j] }                           # only where mx may be seen afterwards

**Why it is the same.** Let ``m0`` and ``p0`` be M's and P's values before the loop and
``U = max(m0, E_j for j before the first NaN of E)``. The loop moves P at ``j`` exactly where
``E_j`` is larger than every value before it (``m0`` included), so the last move is at the
first ``j`` with ``E_j == U``, if ``U > m0``; if ``U == m0`` nothing moves P. At the first NaN
the comparison fails and ``max=`` makes M NaN, after which nothing compares larger: the
positions from the first NaN on never count. If ``m0`` is NaN, ``U`` is NaN and nothing
equals it, and the loop never moves P either. ``>=`` (the last of equal values) moves P at
the last ``j`` with ``E_j == U`` (``U >= m0`` always), found by a ``max=`` from -1. ``<`` and
``<=`` with ``min=`` are the mirror images. Only comparisons decide, so ``-0.0`` and
``0.0`` (equal) cannot tell the two apart. A loop of no iteration leaves P and M as they
were in both. ``tests/test_scans.py`` holds the two equal in the reference executor on rows
of ties, infinities, NaN and signed zeros, and on the host.

**Which loops.** A ``seq`` loop ``L`` (index ``j``) in the body of a ``par`` loop, whose body
is exactly the two statements, in that order:

* ``P = select(E c M, j, P)``: ``c`` is ``>`` or ``>=`` (``M < E``, ``M <= E`` too) for a
  ``max=``, ``<`` or ``<=`` for a ``min=``; the then-value is ``j`` itself and the other is
  P's own element;
* ``M op= E`` with the same ``E`` (compared by value, not text position);

where P and M are two buffers, each one element for every iteration of ``L`` (indices free
of ``j``), E reads neither, neither statement is guarded, M's type is one the lanes combine
(``f32 f64 i32 i64``) and the buffers E reads promote to exactly that type (so the
comparison, the update and every pass compute E alike, and M holds it without rounding),
and isl finds no dependence between two iterations of ``L`` other than through P and M
(``Dependences.carried_only_on``). M's own update stays, as a last pass, unless M is a
``new`` declared in the scan's block that no other statement reads. A select whose
comparison is negated (``select(E <= M, P, j)``) is another function under NaN and is not
taken. A scan at the top level (the argmax of a whole array: a serial kernel) is one too:
its passes are top-level reductions, with program-wide temporaries, which the splits
(``transform.split``) may cut into parts over the whole GPU.

Whether to rewrite is the pipeline's choice (``scan_choice.choose_scans``): both programs
are mapped by SCIP and the cheaper kept; a ``passes`` pin fixes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from polymap.errors import ProgramError
from polymap.ir.accumulators import COMBINED_TYPES
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    CmpOp,
    Compare,
    Condition,
    DType,
    IConst,
    IndexValue,
    IVar,
    Logic,
    LogicOp,
    Loop,
    LoopKind,
    New,
    Program,
    Read,
    Select,
    Stmt,
    ValueExpr,
    index_vars,
    reads_of,
    result_reads,
    statement_text,
)
from polymap.ir.value_types import promote
from polymap.ir.walk import fresh_name, names_in_use, statements
from polymap.transform.registers import renumber_statements

if TYPE_CHECKING:
    from polymap.poly.model import PolyModel

# the comparison ``E c M`` that moves the position, per operator of M's update: whether
# it keeps the first of equal values (strict) or the last
_MOVES = {
    AssignOp.MAX: {CmpOp.GT: True, CmpOp.GE: False},
    AssignOp.MIN: {CmpOp.LT: True, CmpOp.LE: False},
}
_MIRRORED = {CmpOp.GT: CmpOp.LT, CmpOp.GE: CmpOp.LE, CmpOp.LT: CmpOp.GT, CmpOp.LE: CmpOp.GE}


@dataclass(frozen=True, slots=True)
class SelectScan:
    """A loop that may be rewritten (see the module docstring): ``path`` leads to it from
    the program's body (a position in each block, the loop's last), ``position`` is
    ``P = select(E c M, j, P)`` and ``extreme`` ``M op= E``; ``first``: a strict comparison
    (the first of equal values wins); ``nan``: E is a float (its first NaN freezes P);
    ``keeps_extreme``: M is read after the loop or seen by the caller, so its update stays,
    as a pass of its own."""

    path: tuple[int, ...]
    loop: Loop
    position: Assign
    extreme: Assign
    value: ValueExpr
    first: bool
    nan: bool
    keeps_extreme: bool

    @property
    def index(self) -> str:
        return self.loop.index

    def describe(self) -> str:
        """```best[i] = select(X[i, j] > mx, j, best[i])` at 26:5 with `mx max= X[i, j]` at 27:5``,
        for the report: the statements as written, by place, not by name (the rewrite
        renumbers them, and the report's tables show the program as mapped)."""
        return f"{statement_text(self.position)} with {statement_text(self.extreme)}"


def select_scans(program: Program, model: PolyModel) -> tuple[SelectScan, ...]:
    """Every loop of ``program`` that is a select scan, in textual order (``model``: the
    analysis of ``program``)."""
    return tuple(s for s in candidates(program, model) if isinstance(s, SelectScan))


def candidates(program: Program, model: PolyModel) -> Iterator[SelectScan | tuple[Loop, str]]:
    """Each seq loop in a par loop's body or at the top level: a SelectScan, or the loop and
    why it is none."""
    # the top level counts as a par body: a scan there is a serial kernel, whose passes the
    # splits (``split_choice``) may then spread over the GPU
    for path, loop, depth in _seq_loops_in_par(program.body, (), 0, True):
        found = scan_at(program, model, path, loop, depth)
        yield found if isinstance(found, SelectScan) else (loop, found)


def scan_at(
    program: Program, model: PolyModel, path: tuple[int, ...], loop: Loop, depth: int
) -> SelectScan | str:
    """The select scan of ``loop`` (at ``path``, inside ``depth`` loops), or why it is none."""
    body = loop.body
    if len(body) != 2 or not all(isinstance(s, Assign) for s in body):
        return f"loop '{loop.index}' does not hold exactly two assignments"
    position, extreme = body
    if any(s.guard is not None or s.predicate is not None or s.is_atomic for s in body):
        return f"loop '{loop.index}' holds a guarded or atomic statement"
    if extreme.op not in _MOVES:
        return f"its second statement is no max= or min= ({extreme.name} `{extreme}`)"
    value = extreme.value
    select = position.value
    if position.op is not AssignOp.SET or not isinstance(select, Select):
        return f"its first statement is no select ({position.name} `{position}`)"
    own = Read(position.buffer, position.indices)
    if select.then != IndexValue(IVar(loop.index)) or select.otherwise != own:
        return f"{position.name} does not choose between '{loop.index}' and its own element"
    first = _moves(select.cond, value, Read(extreme.buffer, extreme.indices), extreme.op)
    if first is None:
        return (
            f"{position.name}'s condition is not '{value} {_operator(extreme.op)} "
            f"{Read(extreme.buffer, extreme.indices)}' (the value {extreme.name} takes the {extreme.op.value} of)"
        )
    if position.buffer == extreme.buffer:
        return f"the position and the {extreme.op.value} update one buffer '{position.buffer}'"
    if any(index_vars(i) & {loop.index} for s in body for i in s.indices):
        return f"the element {position.name} or {extreme.name} writes changes with loop '{loop.index}'"
    if {r.buffer for r in reads_of(value)} & {position.buffer, extreme.buffer}:
        return f"the compared value reads '{position.buffer}' or '{extreme.buffer}'"
    m_type = program.buffer(extreme.buffer).dtype
    dtype_of = lambda name: program.buffer(name).dtype  # noqa: E731
    flowing = result_reads(value)
    # E computes in the promotion of the buffers it reads, in the comparison, the update and
    # every pass alike, only where that promotion is M's own type (then M's, the comparison's
    # and the update's types agree, and a literal in E takes one type everywhere)
    if (
        m_type not in COMBINED_TYPES
        or not flowing
        or promote(*(dtype_of(r.buffer) for r in flowing)) is not m_type
    ):
        return (
            f"the compared value {value} does not compute in the type of '{extreme.buffer}' "
            f"({m_type.value}) from the buffers it reads (the comparison and the {extreme.op.value} would see "
            "different values)"
        )
    if not model.dependences.carried_only_on(
        {position.name, extreme.name}, depth, {position.buffer, extreme.buffer}
    ):
        return f"an iteration of loop '{loop.index}' depends on another through a third buffer"
    return SelectScan(
        path,
        loop,
        position,
        extreme,
        value,
        first,
        nan=m_type.is_float,
        keeps_extreme=_outlives(program, extreme.buffer, path, loop),
    )


def rewrite_scan(program: Program, scan: SelectScan) -> Program:
    """``program`` with ``scan``'s loop replaced by its passes (the module docstring)."""
    taken = names_in_use(program)
    j, extent = IVar(scan.index), scan.loop.extent
    at_end = IndexValue(extent)
    p, m = scan.position, scan.extreme
    loc = p.loc
    own = Read(p.buffer, p.indices, loc)
    start = Read(m.buffer, m.indices, loc)  # M before the loop
    e = scan.value
    p_type = program.buffer(p.buffer).dtype.compute
    counter = DType.I64 if p_type is DType.I64 else DType.I32
    stmts: list[Stmt] = []
    top_level = len(scan.path) == 1
    declared: list[BufferDecl] = []  # program-wide, for a scan at the top level

    def temporary(hint: str, dtype: DType) -> Read:
        name = fresh_name(hint, taken)
        taken.add(name)
        decl = BufferDecl(name, BufferKind.NEW, dtype, (), loc)
        # at the top level each pass may become a kernel of its own (split into parts): the
        # temporaries are program-wide buffers, not a block's
        if top_level:
            declared.append(decl)
        else:
            stmts.append(New(decl))
        return Read(name, (), loc)

    def scan_loop(target: Read, op: AssignOp, value: ValueExpr) -> Loop:
        update = Assign(p.name, target.buffer, (), op, value, loc)
        return Loop(LoopKind.SEQ, scan.index, extent, (update,), scan.loop.loc)

    before: Condition | None = None
    if scan.nan:
        nan_at = temporary(f"{p.buffer}_nan_at", counter)
        stmts.append(Assign(p.name, nan_at.buffer, (), AssignOp.SET, at_end, loc))
        stmts.append(scan_loop(nan_at, AssignOp.MIN, Select(Compare(CmpOp.NE, e, e), IndexValue(j), at_end)))
        before = Compare(CmpOp.LT, IndexValue(j), nan_at)
    upto = temporary(f"{m.buffer}_upto", program.buffer(m.buffer).dtype)
    stmts.append(Assign(m.name, upto.buffer, (), AssignOp.SET, start, loc))
    stmts.append(scan_loop(upto, m.op, e if before is None else Select(before, e, start)))
    at = temporary(f"{p.buffer}_at", counter)
    cond = _all(before, Compare(CmpOp.EQ, e, upto))
    if scan.first:  # the first j holding U, if U moved past M's start
        beyond = CmpOp.GT if m.op is AssignOp.MAX else CmpOp.LT
        cond, none, op = Logic(LogicOp.AND, cond, Compare(beyond, e, start)), at_end, AssignOp.MIN
        found = Compare(CmpOp.LT, at, at_end)
    else:  # the last j holding U
        none, op = IndexValue(IConst(-1)), AssignOp.MAX
        found = Compare(CmpOp.GE, at, IndexValue(IConst(0)))
    stmts.append(Assign(p.name, at.buffer, (), AssignOp.SET, none, loc))
    stmts.append(scan_loop(at, op, Select(cond, IndexValue(j), none)))
    stmts.append(replace(p, value=Select(found, at, own)))
    if scan.keeps_extreme:
        stmts.append(replace(scan.loop, body=(m,)))
    body = _replaced(program.body, scan.path, tuple(stmts))
    return renumber_statements(replace(program, buffers=(*program.buffers, *declared), body=body))


def replay_scans(program: Program, scans, *, context: str | None, analyze) -> Program:
    """``program`` with the rewrites a mapping made (``Mapping.scans``, in order) made again
    (each found again as a select scan by isl); ``program`` itself where one does not apply
    (then it is not the program they were made on, and the caller's comparison with
    ``Mapping.program`` fails)."""
    done = program
    for choice in scans:
        if not choice.rewritten:
            continue
        try:
            found = select_scans(done, analyze(done, context=context))
        except ProgramError:
            return program
        match = [s for s in found if s.path == choice.path and s.index == choice.loop]
        if not match:
            return program
        done = rewrite_scan(done, match[0])
    return done


def _moves(cond: Condition, value: ValueExpr, extreme: Read, op: AssignOp) -> bool | None:
    """Whether ``cond`` is ``value c extreme`` (or its mirror) for a ``c`` that moves the
    position under ``op``: True where it keeps the first of equal values, False the last;
    None if it is no such comparison."""
    if not isinstance(cond, Compare):
        return None
    if cond.lhs == value and cond.rhs == extreme:
        c = cond.op
    elif cond.rhs == value and cond.lhs == extreme and cond.op in _MIRRORED:
        c = _MIRRORED[cond.op]
    else:
        return None
    return _MOVES[op].get(c)


def _operator(op: AssignOp) -> str:
    return "> (or >=)" if op is AssignOp.MAX else "< (or <=)"


def _all(first: Condition | None, then: Condition) -> Condition:
    return then if first is None else Logic(LogicOp.AND, first, then)


def _outlives(program: Program, buffer: str, path: tuple[int, ...], loop: Loop) -> bool:
    """Whether M's value after the scan may be seen: M is not declared in the block that
    holds the scan (the caller's buffer, a program-wide ``new`` for a scan in a loop, or a
    block-local one of an outer block, which a later iteration of an enclosing loop sees
    again; at the top level the program-wide ``new`` buffers are the block's), or a statement
    outside the scan reads it (``Assign.reads``: its value, its predicate, a gathered index
    of its target, or the target of an update)."""
    block = _block_at(program.body, path[:-1])
    if len(path) == 1:  # the top level's block declares the program-wide ``new`` buffers
        declared = program.buffer(buffer).kind is BufferKind.NEW
    else:
        declared = any(isinstance(s, New) and s.decl.name == buffer for s in block)
    if not declared:
        return True
    inside = {id(s) for s in loop.body}
    return any(
        id(ctx.stmt) not in inside and any(r.buffer == buffer for r in ctx.stmt.reads())
        for ctx in statements(program)
    )


def _block_at(block: tuple[Stmt, ...], path: tuple[int, ...]) -> tuple[Stmt, ...]:
    """The body of the loop at ``path`` (the program's body for an empty path)."""
    for k in path:
        loop = block[k]
        assert isinstance(loop, Loop)
        block = loop.body
    return block


def _seq_loops_in_par(
    block: tuple[Stmt, ...], path: tuple[int, ...], depth: int, in_par: bool
) -> Iterator[tuple[tuple[int, ...], Loop, int]]:
    """Each seq loop directly in a par loop's body: its path, the loop, and the loops around it."""
    for k, stmt in enumerate(block):
        if not isinstance(stmt, Loop):
            continue
        if in_par and not stmt.is_par:
            yield (*path, k), stmt, depth
        yield from _seq_loops_in_par(stmt.body, (*path, k), depth + 1, stmt.is_par)


def _replaced(block: tuple[Stmt, ...], path: tuple[int, ...], stmts: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """``block`` with the statement at ``path`` replaced by ``stmts``."""
    k, rest = path[0], path[1:]
    if not rest:
        return (*block[:k], *stmts, *block[k + 1 :])
    loop = block[k]
    assert isinstance(loop, Loop)
    return (*block[:k], replace(loop, body=_replaced(loop.body, rest, stmts)), *block[k + 1 :])


__all__ = ["SelectScan", "candidates", "replay_scans", "rewrite_scan", "scan_at", "select_scans"]
