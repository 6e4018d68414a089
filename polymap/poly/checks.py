"""Race, bounds and initialization checks, proved with isl (emptiness of sets), never
sampled.

The checks work on parametric sets: a size that is not bound stays an isl parameter
restricted by the context, so "empty" means "for every size in the context". When a set
is not empty, its lexicographically smallest point (sizes first) is the witness quoted in
the message, so the reported sizes are the smallest ones that show the problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import islpy as isl

from polymap.errors import BoundsError, RaceError, SourceLoc, UninitializedReadError
from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    BufferKind,
    Logic,
    Loop,
    Program,
    Read,
    Select,
    Stmt,
    reads_of,
    value_children,
)
from polymap.poly.deps import union_of
from polymap.poly.isl_text import IslNames, evaluate_index, shown_index

if TYPE_CHECKING:
    from polymap.poly.model import Access, BufferModel, StatementModel

_IN, _OUT, _SET, _PARAM = isl.dim_type.in_, isl.dim_type.out, isl.dim_type.set, isl.dim_type.param


@dataclass(frozen=True, slots=True)
class ParLoop:
    """A par loop, identified by ``position``: the block positions from the program body
    down to the loop (loops are compared by value, so two identical sibling loops would be
    equal; their positions are not). ``depth`` is the number of loops around it and
    ``statements`` the names of the statements inside it."""

    index: str
    position: tuple[int, ...]
    depth: int
    statements: tuple[str, ...]
    loc: SourceLoc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"par loop '{self.index}'" + (f" at {self.loc}" if self.loc else "")


def par_loops(program: Program, statements: tuple[StatementModel, ...]) -> tuple[ParLoop, ...]:
    """Every par loop of the program, in textual order (outer loops before inner ones)."""
    found: list[ParLoop] = []

    def visit(block: tuple[Stmt, ...], prefix: tuple[int, ...]) -> None:
        for pos, stmt in enumerate(block):
            if isinstance(stmt, Loop):
                where = prefix + (pos,)
                if stmt.is_par:
                    inside = tuple(s.name for s in statements if s.ctx.position[: len(where)] == where)
                    found.append(ParLoop(stmt.index, where, len(prefix), inside, stmt.loc))
                visit(stmt.body, where)

    visit(program.body, ())
    return tuple(found)


def check_races(
    program: Program, statements: tuple[StatementModel, ...], names: IslNames
) -> tuple[ParLoop, ...]:
    """Prove every par loop race free, or raise RaceError with a witness.

    For a par loop at depth d and two accesses a1 (in s1), a2 (in s2) inside it, to the
    same buffer, one of them a write, the conflicting pairs are
    ``{ x -> y : x in D1, y in D2, x[:d] = y[:d], x[d] != y[d], a1(x) = a2(y) }``
    (same iteration of the loops around the par loop, different iterations of it, same
    element); the loop is race free when every such set is empty. Two atomic updates
    with one operator (``Access.commutes_with``) are not a race."""
    loops = par_loops(program, statements)
    by_name = {s.name: s for s in statements}
    for loop in loops:
        accesses = [(by_name[n], a) for n in loop.statements for a in by_name[n].accesses]
        for k, (s1, a1) in enumerate(accesses):
            for s2, a2 in accesses[k:]:
                if not (a1.is_write or a2.is_write) or a1.commutes_with(a2):
                    continue  # two atomic updates with one operator meet in any order
                if a1.relation.get_tuple_name(_OUT) != a2.relation.get_tuple_name(_OUT):
                    continue
                same = a1.relation.apply_range(a2.relation.reverse())
                for dim in range(loop.depth):
                    same = same.equate(_IN, dim, _OUT, dim)
                d = loop.depth
                pairs = same.order_lt(_IN, d, _OUT, d).union(same.order_gt(_IN, d, _OUT, d))
                if not pairs.is_empty():
                    raise _race(program, loop, (s1, a1), (s2, a2), pairs, names)
    return loops


def check_bounds(
    program: Program,
    statements: tuple[StatementModel, ...],
    buffers: Mapping[str, BufferModel],
    names: IslNames,
) -> None:
    """Prove every access inside its buffer's declared shape, or raise BoundsError.

    The out-of-bounds instances of an access ``a`` to buffer ``B`` are
    ``domain(a - (D -> in_bounds(B)))``; the check is that this set is empty. The
    expanded dimensions of a block-local buffer are in bounds by construction. A gathered
    index is checked at run time; here its access is checked with the index at 0, which
    proves the other indices in bounds and the gathered dimension never empty (else no value
    could be in bounds: ``pm_gather``'s fallback element 0 must exist)."""
    for s in statements:
        for a in s.accesses:
            buffer = buffers[a.relation.get_tuple_name(_OUT)]
            outside = a.addressing.subtract_range(buffer.in_bounds)
            if outside.is_empty():
                continue
            params, coords = _witness(outside.wrap(), names)
            env = _env(s, params, coords)
            shape = [evaluate_index(e, env) for e in buffer.decl.shape]
            where = _with(params, ())
            raise BoundsError(
                f"{s.label} {a.verb} {a.text} outside the declared shape of `{buffer.decl}`; e.g. {where}"
                f"{_at(s, coords, 0) or s.name} {a.verb} {_address(a, env)}, outside {a.buffer}'s shape {shape}",
                loc=a.loc,
                **program.error_context(),
            )


def check_initialized(
    program: Program,
    statements: tuple[StatementModel, ...],
    buffers: Mapping[str, BufferModel],
    schedule: isl.UnionMap,
    names: IslNames,
) -> None:
    """Prove that every read of a temporary (a ``new`` buffer, whose elements start
    undefined) can find a write before it, or raise UninitializedReadError with a witness.

    isl's dataflow analysis over the textual schedule: the writes that surely happen are its
    *must* sources, those that may not (under a data condition, or a scatter's element read
    at run time) its *may* sources, and the reads that have no source at all
    (``must_no_source``) read an element nothing wrote. Only reads that surely happen are
    such sinks: a read in a branch of a ``select`` (computed only when chosen), or under a
    data condition, is left out; a gathered read (it may touch every element along the
    gathered dimension) is refused only where none of those elements was written. So no
    program that reads only what it wrote is refused. Writes in a loop of no iteration write
    nothing: a read after ``seq N j { t = ... }`` reads nothing at N = 0, where the context
    allows it."""
    temporaries = {b.isl_name for b in buffers.values() if b.decl.kind is BufferKind.NEW}
    if not temporaries:
        return
    sinks, musts, mays = [], [], []
    for s in statements:
        surely = _surely_read(s.stmt)
        for a in s.accesses:
            if a.relation.get_tuple_name(_OUT) not in temporaries:
                continue
            if a.is_write:
                (mays if a.may or a.gathered else musts).append(a)
            elif (a.buffer, a.indices) in surely:
                sinks.append((s, a))
    if not sinks:
        return
    info = isl.UnionAccessInfo.from_sink(union_of(a.relation for _, a in sinks))
    flow = (
        info.set_must_source(union_of(a.relation for a in musts))
        .set_may_source(union_of(a.relation for a in mays))
        .set_schedule_map(schedule)
        .compute_flow()
    )
    unread = flow.get_must_no_source()
    if unread.is_empty():
        return
    for s, a in sinks:  # the first read in textual order, with its smallest witness
        found = _unread_instances(a, unread)
        if found.is_empty():
            continue
        params, coords = _witness(found, names)
        at = _at(s, coords, 0)
        update = isinstance(s.stmt, Assign) and s.stmt.op.is_update and s.stmt.buffer == a.buffer
        start = (
            f" (an update: give {s.stmt.target} its start, {_STARTS.get(s.stmt.op, 'its first value')}, before "
            "the loops that update it)"
            if update
            else ""
        )
        where = _with(params, (at,) if at else ())
        raise UninitializedReadError(
            f"{s.label} reads {a.text} before anything writes it: {a.buffer} is a temporary (`new`), whose "
            f"elements start undefined; e.g. {where}it reads {shown_address(a, s, params, coords)}, which no "
            f"earlier statement writes{start}",
            loc=a.loc,
            **program.error_context(),
        )


def _unread_instances(a: Access, unread: isl.UnionMap) -> isl.Set:
    """The instances of a read whose element nothing wrote before them; for a gathered read
    (it may touch any element along the gathered dimensions), those where no element it may
    touch was written: the one it touches surely was not."""
    pairs = unread.extract_map(a.relation.get_space()).intersect(a.relation)
    if not a.gathered:
        return pairs.domain().coalesce()
    return a.relation.domain().subtract(a.relation.subtract(pairs).domain()).coalesce()


# the start an update's accumulator needs: its operator's identity
_STARTS = {AssignOp.ADD: "0", AssignOp.SUB: "0", AssignOp.MUL: "1", AssignOp.MAX: "-inf", AssignOp.MIN: "inf"}


def _surely_read(stmt) -> set[tuple[str, tuple]]:
    """The (buffer, indices) of the reads a statement makes whenever it runs: its data
    condition's (``if`` on data), and where it has none its value's and an update's read of
    its target. A ``select`` computes only its chosen branch (a read in both is sure), and
    ``and``/``or`` stop after their left operand where it decides (as C does). An anchor
    discards its value: none."""
    if isinstance(stmt, Anchor):
        return set()

    def sure(e) -> set[tuple[str, tuple]]:
        if isinstance(e, Select):
            return sure(e.cond) | (sure(e.then) & sure(e.otherwise))
        if isinstance(e, Logic):
            return sure(e.lhs)
        if isinstance(e, Read):
            return {(read.buffer, read.indices) for read in reads_of(e)}
        return set().union(*(sure(child) for child in value_children(e)))

    if stmt.predicate is not None:
        return sure(stmt.predicate)
    found = sure(stmt.value)
    if stmt.op.is_update:
        found.add((stmt.buffer, stmt.indices))
    return found


def _race(program, loop: ParLoop, first, second, pairs: isl.Map, names: IslNames) -> RaceError:
    (s1, a1), (s2, a2) = first, second
    if a1 is a2:
        what = f"{s1.label} {a1.verb} {a1.text} in two different iterations of '{loop.index}'"
    else:
        what = (
            f"{s1.label} {a1.verb} {a1.text} and {s2.label} {a2.verb} {a2.text} "
            f"in different iterations of '{loop.index}'"
        )
    params, coords = _witness(pairs.wrap(), names)
    x, y = coords[: len(s1.dims)], coords[len(s1.dims) :]
    addr1 = shown_address(a1, s1, params, x)
    addr2 = shown_address(a2, s2, params, y)
    outer = tuple(f"{n} = {v}" for n, v in zip(s1.ctx.indices[: loop.depth], x))
    side1, side2 = _at(s1, x, loop.depth), _at(s2, y, loop.depth)
    if s1.name != s2.name:
        side1, side2 = f"{side1} ({s1.name})", f"{side2} ({s2.name})"
    if a1.is_write == a2.is_write and addr1 == addr2 and s1.name == s2.name:
        example = f"{side1} and {side2} both {a1.verb_plural} {addr1}"
    else:
        example = f"{side1} {a1.verb} {addr1} and {side2} {a2.verb} {addr2}"
    return RaceError(
        f"race in {loop}: {what}; e.g. {_with(params, outer)}{example}",
        loc=a1.loc,
        **program.error_context(),
    )


def _witness(wrapped: isl.Set, names: IslNames) -> tuple[dict[str, int], list[int]]:
    """The lexicographically smallest point of a set, sizes first: (sizes, coordinates)."""
    n_params = wrapped.dim(_PARAM)
    param_names = [names.user(wrapped.get_dim_name(_PARAM, k)) for k in range(n_params)]
    flat = wrapped.move_dims(_SET, 0, _PARAM, 0, n_params)
    point = flat.lexmin().sample_point()
    values = [int(point.get_coordinate_val(_SET, k).to_python()) for k in range(flat.dim(_SET))]
    return dict(zip(param_names, values[:n_params])), values[n_params:]


def _env(s: StatementModel, params: dict[str, int], coords: list[int]) -> dict[str, int]:
    # Later loops overwrite earlier ones: an inner index shadows an outer one of that name.
    env = dict(params)
    env.update(zip(s.ctx.indices, coords))
    return env


def shown_address(a: Access, s: StatementModel, values: dict[str, int], coords) -> str:
    """The element ``a`` touches at instance ``coords`` of ``s`` (``values``: the sizes), for
    messages: ``A[3, 4]``, a gathered index as the element it is read from (``E[ids[2], 4]``)."""
    return _address(a, _env(s, values, coords))


def _address(a: Access, env: dict[str, int]) -> str:
    if not a.indices:
        return a.buffer  # a 0-d buffer reads as its bare name
    return f"{a.buffer}[{', '.join(shown_index(e, env) for e in a.indices)}]"


def _at(s: StatementModel, coords: list[int], start: int) -> str:
    return ", ".join(f"{n} = {v}" for n, v in zip(s.ctx.indices[start:], coords[start:]))


def _with(params: dict[str, int], outer: tuple[str, ...]) -> str:
    parts = []
    if params:
        parts.append("with " + ", ".join(f"{n} = {v}" for n, v in params.items()))
    if outer:
        parts.append("at " + ", ".join(outer))
    return ", ".join(parts) + ": " if parts else ""
