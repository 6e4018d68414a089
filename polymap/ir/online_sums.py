"""Online sums: a running maximum and sums kept relative to it, the one-pass softmax
(Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018), which lets its
loop be spread over the lanes of a warp as an accumulator is (``mapping.lanes``).

The form, as a loop ``L`` writes it (statements of its body, in this order, under no ``if``
or one ``if`` of the indices around them all, which skips an iteration as a whole;
``top`` declared in ``L``, ``m`` and each ``s`` outside it)::

    top = max(m, x)                              # or max(x, m)
    s = s * exp(m - top) + w * exp(x - top)      # or exp(x - top) * w, or exp(x - top);
                                                 # either product and either summand first
    m = top

with one or more sums ``s`` (a softmax's denominator and a weighted sum beside it, each
updated once), where ``x`` (one expression, the same in the maximum and in every term) and
``w`` read none of ``m``, the sums and ``top``, no other statement of ``L`` touches ``m``, a
sum or ``top``, ``m`` is no sum, and all of them have one float type (``f32`` or ``f64``) in
which the statements compute. Every factor ``exp(..)`` is then at most 1 on any lane, as in
the program's order: a lane's maximum is at most the loop's, and its terms never overflow
where the loop's do not.

``m`` must not start from an infinite literal (``m = -inf`` before the loop): every lane
but lane 0 starts the loop afresh from ``m``'s start, so a lane whose first ``x`` is
``-inf`` (a masked element) would compute ``exp(-inf - -inf)``, NaN, where the program in
order had met a finite element first. Start from the row's first element, or a finite bound.

Why a loop of them can run on the lanes. Take one sum; the pair ``(m, s)`` stands for the
value ``s * e^m``: each iteration adds ``w * e^x`` to it (``s' e^top = s e^m + w e^x``), and
``m`` is a ``max=`` of the ``x`` (exact in any order). Two partial pairs ``(m1, s1)``,
``(m2, s2)`` stand for the sum of their values, which is the pair ``(M, s1 e^(m1 - M) + s2
e^(m2 - M))`` with ``M = max(m1, m2)``: the join combines the lanes' pairs so
(``pm_lanes_online``; a pair already at ``M`` keeps its sum, factor 1, so that two pairs at
an infinite ``M`` add instead of making NaN). A lane starts ``m`` from lane 0's value (as
any ``max=``) and ``s`` at 0 (the pair then stands for 0, whatever ``m`` is), so the
combined pair stands for lane 0's start plus every iteration's term, and its ``m`` is the
loop's maximum. The sum is added in another order and each term is rounded relative to
another ``M`` on its way: a float sum reordered, allowed only with ``reassociate``, as a
``+=`` is. Several sums relative to one ``m`` are rescaled by the same two factors at each
combine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    Call,
    Const,
    DType,
    Fn,
    Loop,
    New,
    Program,
    Read,
    Stmt,
    ValueExpr,
    ValueOp,
    leaves_of,
    reads_of,
)
from polymap.ir.value_types import statement_type
from polymap.ir.walk import loops, statements, walk_block

ONLINE_TYPES = (DType.F32, DType.F64)


@dataclass(frozen=True, slots=True)
class OnlineSum:
    """The online sums of a loop's body kept relative to one running maximum (module
    docstring): ``totals``, updated through the loop's own temporary ``step``."""

    maximum: str  # m
    totals: tuple[str, ...]  # s (one or more, in the order the loop updates them)
    step: str  # the temporary ``top = max(m, x)`` of each iteration
    statements: tuple[str, ...]  # the running maximum's, the sums', and ``m = top``, in order


def online_sums(
    body: tuple[Stmt, ...], outside: dict[str, BufferDecl], dtype_of: Callable[[str], DType]
) -> tuple[OnlineSum, ...]:
    """The online sums of a loop whose body is ``body``, in the form of the module docstring
    (whether a maximum starts from an infinite literal is ``infinite_start``'s);
    ``outside``: the locals declared outside the loop, by name; ``dtype_of``: a buffer's type."""
    own = {s.decl.name: s.decl for s in body if isinstance(s, New)}
    assigns = [s for s in body if isinstance(s, Assign)]
    found = []
    for position, moved in enumerate(assigns):  # m = top
        m, step = moved.buffer, _plain_read(moved.value)
        if moved.indices or moved.op is not AssignOp.SET or step is None or step not in own:
            continue
        if m not in outside or outside[m].shape or own[step].shape:
            continue
        dtype = outside[m].dtype
        if dtype not in ONLINE_TYPES or own[step].dtype is not dtype:
            continue
        writes = [s for s in assigns[:position] if s.buffer == step]
        if len(writes) != 1:
            continue
        (maximum,) = writes
        x = _running_max_of(maximum, m)
        between = assigns[assigns.index(maximum) + 1 : position]
        sums = [s for s in between if _new_exponent(s, m, step) is not None]
        totals = tuple(dict.fromkeys(s.buffer for s in sums))
        if x is None or not sums or len(totals) != len(sums) or m in totals:
            continue  # no running maximum, no sum, one updated twice, or the maximum as a sum
        if any(t not in outside or outside[t].shape or outside[t].dtype is not dtype for t in totals):
            continue
        names = {m, step, *totals}
        if _reads(x, names) or any(_new_exponent(s, m, step) != x for s in sums):
            continue  # x reads the group, or a term's exponent is not what the maximum takes
        if any(_reads(s.value, set(totals) - {s.buffer}) for s in sums):
            continue  # a term that reads another sum: a lane's partial, not the loop's value
        group = (maximum, *sums, moved)
        # one if of the indices around them all (a split's part: ``transform.split_online``)
        # skips an iteration as a whole; a data predicate or an atomic does not combine
        if any(s.guard != maximum.guard or s.predicate is not None or s.is_atomic for s in group):
            continue
        if any(statement_type(s, dtype_of) is not dtype.compute for s in group):
            continue
        if not _only_here(body, group, names):
            continue
        found.append(OnlineSum(m, totals, step, tuple(s.name for s in group)))
    return tuple(found)


def infinite_start(
    maximum: str, assigns: list[Assign], inside: set[str], dtype: DType | None = None
) -> ValueExpr | None:
    """The first value that a statement of ``assigns`` not in ``inside`` (the loop's
    statements) gives ``maximum`` and that is infinite or NaN whatever the data: it holds
    such a literal (``-inf``), or (with ``dtype``, the maximum's type) one beyond the type's
    range (``-1e39`` in ``f32``), or reads a 0-d buffer that such a statement sets to one
    (``lo = -inf; mx = lo``). An online sum whose maximum may start from it stays in one
    thread, and is not split (module docstring)."""
    outside = [s for s in assigns if s.name not in inside]

    def infinite(value: ValueExpr, seen: frozenset[str]) -> bool:
        if non_finite(value, dtype):
            return True
        for read in reads_of(value):
            if read.indices or read.buffer in seen:
                continue
            if any(infinite(s.value, seen | {read.buffer}) for s in outside if s.buffer == read.buffer):
                return True
        return False

    for stmt in outside:
        if stmt.buffer == maximum and infinite(stmt.value, frozenset({maximum})):
            return stmt.value
    return None


def infinite_start_notes(program: Program) -> tuple[str, ...]:
    """A note per online sum of ``program`` that stays in one thread only because its
    maximum starts from an infinite literal (``mx = -inf``, module docstring): the form is
    the one users write, and the remedy is one edit."""
    local = {d.name: d for d in program.all_buffers()[len(program.buffers) :]}  # block-local
    assigns = [ctx.stmt for ctx in statements(program) if isinstance(ctx.stmt, Assign)]
    notes = []
    for loop, _ in loops(program):
        if loop.is_par:
            continue
        inside = {s.name for s in walk_block(loop.body) if isinstance(s, (Assign, Anchor))}
        own = {s.decl.name for s in walk_block(loop.body) if isinstance(s, New)}
        outside = {name: decl for name, decl in local.items() if name not in own}
        for group in online_sums(loop.body, outside, lambda b: program.buffer(b).dtype):
            start = infinite_start(group.maximum, assigns, inside, outside[group.maximum].dtype)
            if start is not None:
                where = f" at {loop.loc}" if loop.loc is not None else ""
                notes.append(
                    f"note: loop '{loop.index}'{where} keeps {', '.join(repr(t) for t in group.totals)} relative to "
                    f"the running maximum '{group.maximum}' (an online sum), but '{group.maximum}' starts from "
                    f"{start}, so the loop stays in one thread: a lane starting from it whose first element is "
                    f"-inf would compute exp(-inf - -inf), NaN. Start '{group.maximum}' from the row's first element "
                    "or a finite bound such as -1e30 to let a warp share the loop (docs/mapping.md, 'Online sums')"
                )
    return tuple(notes)


def _plain_read(e) -> str | None:
    """The 0-d buffer ``e`` reads, where ``e`` is that read alone."""
    return e.buffer if isinstance(e, Read) and not e.indices else None


def _running_max_of(stmt: Assign, m: str) -> ValueExpr | None:
    """``x`` where ``stmt`` is ``top = max(m, x)`` or ``max(x, m)``; else None."""
    value = stmt.value
    if stmt.indices or stmt.op is not AssignOp.SET or not isinstance(value, Call) or value.fn is not Fn.MAX:
        return None
    a, b = value.args
    return b if _plain_read(a) == m else a if _plain_read(b) == m else None


def _new_exponent(stmt: Assign, m: str, step: str) -> ValueExpr | None:
    """``y`` where ``stmt`` is ``s = s * exp(m - top) + w * exp(y - top)`` in one of the forms
    of the docstring, ``w`` and ``y`` reading none of ``s``, ``m`` and ``top``; else None
    (whether they read another sum of the group is the caller's check)."""
    s, value = stmt.buffer, stmt.value
    if (
        stmt.indices
        or stmt.op is not AssignOp.SET
        or not isinstance(value, Binary)
        or value.op is not ValueOp.ADD
    ):
        return None
    for kept, added in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        if _is_scaled_total(kept, s, m, step):
            y = _term_exponent(added, {s, m, step}, step)
            if y is not None:
                return y
    return None


def _is_scaled_total(e, s: str, m: str, step: str) -> bool:
    """``s * exp(m - top)`` or ``exp(m - top) * s``."""
    if not isinstance(e, Binary) or e.op is not ValueOp.MUL:
        return False
    for a, b in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if _plain_read(a) == s and _exp_less(b, step) is not None and _plain_read(_exp_less(b, step)) == m:
            return True
    return False


def _term_exponent(e, names: set[str], step: str) -> ValueExpr | None:
    """``y`` where ``e`` is ``exp(y - top)``, ``w * exp(y - top)`` or ``exp(y - top) * w``,
    ``y`` and ``w`` reading none of ``names``; else None."""
    factors = [(None, e)]
    if isinstance(e, Binary) and e.op is ValueOp.MUL:
        factors += [(e.lhs, e.rhs), (e.rhs, e.lhs)]
    for weight, power in factors:
        y = _exp_less(power, step)
        if y is not None and not _reads(y, names) and (weight is None or not _reads(weight, names)):
            return y
    return None


def _exp_less(e, step: str):
    """``v`` where ``e`` is ``exp(v - top)``; else None."""
    if not isinstance(e, Call) or e.fn is not Fn.EXP:
        return None
    (arg,) = e.args
    if isinstance(arg, Binary) and arg.op is ValueOp.SUB and _plain_read(arg.rhs) == step:
        return arg.lhs
    return None


def _reads(e, names: set[str]) -> bool:
    return any(r.buffer in names for r in reads_of(e))


# the largest finite value of each float storage type: a literal beyond it is infinite there
_LARGEST = {DType.F32: 3.4028234663852886e38, DType.F16: 65504.0, DType.BF16: 3.3895313892515355e38}


def non_finite(e, dtype: DType | None = None) -> bool:
    """Whether a value expression holds an infinite or NaN literal (``-inf``), or, with
    ``dtype``, one beyond that type's range (rounded to an infinity there)."""
    largest = _LARGEST.get(dtype, math.inf) if dtype is not None else math.inf
    for leaf in leaves_of(e):
        if isinstance(leaf, Const):
            value = float(leaf.value)
            if not math.isfinite(value) or abs(value) > largest:
                return True
    return False


def _only_here(body: tuple[Stmt, ...], group: tuple[Assign, ...], names: set[str]) -> bool:
    """No statement of the loop (at any depth) but the group's touches ``m``, a sum or
    ``top`` (its value is a lane's running maximum, not the loop's)."""
    for stmt in walk_block(body):
        if isinstance(stmt, (New, Loop)) or any(stmt is g for g in group):
            continue
        touched = {r.buffer for r in stmt.reads()} | ({stmt.buffer} if isinstance(stmt, Assign) else set())
        if touched & names:
            return False
    return True
