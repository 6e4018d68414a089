"""Splitting an online sum into parts (``transform.split``): a loop that keeps sums relative
to a running maximum (``ir.online_sums``, the one-pass softmax) runs in parts across blocks,
each part with its own maximum and sums, and a combine that rescales them.

A band's loop in the form of ``ir.online_sums`` (its body the group's statements and the
declaration of its ``top``), with the maximum ``m`` and the sums ``s`` declared and set once
each before it::

    par M i {
      new m: f32; new s: f32
      m = X[i, 0]; s = 0
      seq N j { new top: f32; top = max(m, X[i, j]); s = s * exp(m - top) + exp(X[i, j] - top); m = top }
      ...
    }

becomes, for ``P`` parts (cyclic here; ``transform.split`` gives the forms)::

    par P j_part { par M i {
        new m: f32; new s: f32                  # the part's own, in registers
      m = X[i, 0]                             # each part starts where the loop starts
      s = 0                                   # and its sums at 0: the pair stands for 0
      seq (N + P - 1) / P j { new top: f32
        if j_part + P * j < N { top = max(m, X[i, j_part + P * j]) }
        if .. { s = s * exp(m - top) + exp(X[i, j_part + P * j] - top) }
        if .. { m = top } }
      m_parts[j_part, i] = m; s_parts[j_part, i] = s
    } }
    par M i {
      new m: f32; new s: f32
      m = X[i, 0]; s = 0
      seq P j_part { new top_join: f32
        top_join = max(m, m_parts[j_part, i])
        s = s * exp(m - top_join) + s_parts[j_part, i] * exp(m_parts[j_part, i] - top_join)
        m = top_join }
      ...
    }

The combine is itself an online sum (the weight of its new term is the part's sum, the
exponent the part's maximum), so its loop over the parts may run on the lanes of a warp.
Why it is the loop's value: a part's pair ``(m_p, s_p)`` stands for ``s_p e^(m_p)``, the sum
of its iterations' terms ``w e^x`` (``ir.online_sums``); the combine adds the pairs to the
loop's start, each rescaled to the larger maximum, so its result stands for the start plus
every iteration's term, and its ``m`` is the maximum of the start and every ``x``. A part
that runs no iteration stands for 0. Every ``exp`` is at most 1, as in the loop. The sum is
added in another order, each term rounded relative to another maximum: a float sum
reordered, allowed only with ``reassociate``.

``m`` must not start from an infinite literal (``m = -inf``): a part whose first element is
``-inf`` would compute ``exp(-inf - -inf)``, NaN, as a lane would (``ir.online_sums``).
"""

from __future__ import annotations

from dataclasses import dataclass

from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    Call,
    Condition,
    Fn,
    IndexExpr,
    Loop,
    New,
    Program,
    Read,
    Stmt,
    ValueExpr,
    ValueOp,
    guarded,
    reads_of,
    substitute_stmt,
)
from polymap.ir.online_sums import OnlineSum, infinite_start, online_sums
from polymap.ir.walk import walk_block


@dataclass(frozen=True, slots=True)
class OnlineLoop:
    """A loop's online sum that may be split, and how the statements before the loop start
    it: per name of ``names`` (the maximum, then each sum), its declaration and the value it
    is set to there."""

    group: OnlineSum
    decls: tuple[BufferDecl, ...]
    starts: tuple[ValueExpr, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return (self.group.maximum, *self.group.totals)


def online_loop(program: Program, prologue: tuple[Stmt, ...], loop: Loop) -> OnlineLoop | str | None:
    """``loop``'s online sum as an ``OnlineLoop``, or why it cannot be split (a sentence), or
    None where its body holds no online sum (the plain reductions' checks apply then)."""
    declared = {s.decl.name: s.decl for s in prologue if isinstance(s, New)}
    groups = online_sums(loop.body, declared, lambda name: program.buffer(name).dtype)
    if not groups:
        return None
    if len(groups) > 1:
        return f"loop '{loop.index}' holds {len(groups)} online sums (a split takes one)"
    (group,) = groups
    names = (group.maximum, *group.totals)
    for stmt in loop.body:
        if isinstance(stmt, New) and stmt.decl.name == group.step:
            continue
        if not isinstance(stmt, Assign) or stmt.name not in group.statements:
            return f"loop '{loop.index}' holds a statement besides its online sum of {_listed(group.totals)}"
    starts: dict[str, ValueExpr] = {}
    setup = set(map(id, setup_statements(prologue, set(names))))
    for stmt in prologue:
        if id(stmt) in setup or (isinstance(stmt, New) and stmt.decl.name in names):
            continue
        if (
            not isinstance(stmt, Assign)
            or stmt.buffer not in names
            or stmt.op is not AssignOp.SET
            or stmt.guard is not None
            or stmt.predicate is not None
            or stmt.buffer in starts
            or any(r.buffer in names for r in reads_of(stmt.value))
        ):
            return (
                f"the statements before loop '{loop.index}' do more than declare and set its online sum's "
                f"maximum '{group.maximum}' and {_listed(group.totals)} once each, and 0-d values of their own"
            )
        starts[stmt.buffer] = stmt.value
    missing = [name for name in names if name not in declared or name not in starts]
    if missing:
        return f"'{missing[0]}' of loop '{loop.index}''s online sum is not declared and set before it in its band"
    assigns = [s for s in prologue if isinstance(s, Assign)]
    if infinite_start(group.maximum, assigns, set(), declared[group.maximum].dtype) is not None:
        return (
            f"the running maximum '{group.maximum}' of loop '{loop.index}' starts from "
            f"{starts[group.maximum]}, an infinity: a part whose first element is -inf would compute "
            "exp(-inf - -inf)"
        )
    return OnlineLoop(group, tuple(declared[n] for n in names), tuple(starts[n] for n in names))


def setup_statements(
    prologue: tuple[Stmt, ...], targets: set[str], uses: set[str] | None = None
) -> tuple[Stmt, ...]:
    """The statements before a split loop that neither declare, write nor read ``targets``
    but declare a block-local buffer of the band, or set one the prologue declared (``new
    mx: f32; mx = mx_final[i]`` before a sum that reads it): they write no global buffer.
    With ``uses`` (the buffers the loop and the partials' start read), only those that give
    them their values: the parts nest runs these before its partials start, as the band ran
    them before the loop (``transform.split``)."""
    declared: set[str] = set()
    found = []
    for stmt in prologue:
        if isinstance(stmt, New) and stmt.decl.name not in targets:
            declared.add(stmt.decl.name)
            found.append(stmt)
        elif (
            isinstance(stmt, Assign)
            and stmt.buffer in declared
            and not stmt.atomic
            and not any(r.buffer in targets for r in stmt.reads())
        ):
            found.append(stmt)
    if uses is None:
        return tuple(found)
    needed, kept = set(uses), []
    for stmt in reversed(found):  # what each needed value is computed from, back to front
        if isinstance(stmt, Assign) and stmt.buffer in needed:
            needed |= {r.buffer for r in stmt.reads()}
            kept.append(stmt)
        elif isinstance(stmt, New) and stmt.decl.name in needed:
            kept.append(stmt)
    return tuple(reversed(kept))


def read_buffers(stmts: tuple[Stmt, ...], values: tuple[ValueExpr, ...] = ()) -> set[str]:
    """The buffers that ``stmts`` (at any depth) and ``values`` read."""
    names = {r.buffer for value in values for r in reads_of(value)}
    for stmt in walk_block(stmts):
        if isinstance(stmt, (Assign, Anchor)):
            names |= {r.buffer for r in stmt.reads()}
    return names


def touched_buffers(stmts: tuple[Stmt, ...]) -> set[str]:
    """The buffers that ``stmts`` (at any depth) read or write."""
    return read_buffers(stmts) | {s.buffer for s in walk_block(stmts) if isinstance(s, Assign)}


def online_parts_body(
    online: OnlineLoop,
    loop: Loop,
    partials: dict[str, str],
    element: tuple[IndexExpr, ...],
    iteration: IndexExpr,
    below: Condition,
    chunk_extent: IndexExpr,
) -> tuple[Stmt, ...]:
    """The parts nest's loop and stores at one part and band point (module docstring), after
    the group is declared and started as the prologue does (the caller's): the part's
    iterations ``iteration`` of the loop (its index the part's own), each under ``below``,
    then the group's maximum and sums each stored in its partial ``partials[name][element]``."""
    loc = loop.loc
    first = online.group.statements[0]
    steps = tuple(
        stmt if isinstance(stmt, New) else guarded(substitute_stmt(stmt, {loop.index: iteration}), below)
        for stmt in loop.body
    )
    stores = tuple(
        Assign(first, partials[decl.name], element, AssignOp.SET, Read(decl.name, (), loc), loc)
        for decl in online.decls
    )
    return (Loop(loop.kind, loop.index, chunk_extent, steps, loc), *stores)


def online_combine(
    online: OnlineLoop, partials: dict[str, str], element: tuple[IndexExpr, ...], step: str, loc
) -> tuple[Stmt, ...]:
    """The body of the combine's loop over the parts (module docstring): an online sum whose
    new terms are the part's sums, weighted, at the part's maximum, through ``step``."""
    group = online.group
    m = group.maximum
    first = group.statements[0]
    top = Read(step, (), loc)
    part_max = Read(partials[m], element, loc)

    def exp_less(value: ValueExpr) -> ValueExpr:
        return Call(Fn.EXP, (Binary(ValueOp.SUB, value, top, loc),))

    dtype = online.decls[0].dtype
    stmts: list[Stmt] = [
        New(BufferDecl(step, online.decls[0].kind, dtype, (), loc)),
        Assign(first, step, (), AssignOp.SET, Call(Fn.MAX, (Read(m, (), loc), part_max)), loc),
    ]
    for total in group.totals:
        kept = Binary(ValueOp.MUL, Read(total, (), loc), exp_less(Read(m, (), loc)), loc)
        added = Binary(ValueOp.MUL, Read(partials[total], element, loc), exp_less(part_max), loc)
        stmts.append(Assign(first, total, (), AssignOp.SET, Binary(ValueOp.ADD, kept, added, loc), loc))
    stmts.append(Assign(first, m, (), AssignOp.SET, top, loc))
    return tuple(stmts)


def _listed(names: tuple[str, ...]) -> str:
    return ", ".join(f"'{n}'" for n in names)
