"""The width of integer arithmetic in emitted code, decided by proof.

isl proves indices in bounds over the integers; C evaluates every sub-expression in the
type of its operands. An index such as ``(i * 1000000) % 7`` is in bounds for every ``i``,
but ``i * 1000000`` overflows ``int`` once ``i >= 2148``. So every integer expression the
code generator prints gets an interval: the ranges of its variables come from isl (the
exact minimum and maximum of each loop iterator, size, host index, block and thread
coordinate over the launch's domain), and interval arithmetic over the expression tree
bounds every intermediate value. An expression whose intermediates all fit in 32 bits is
printed in ``int``; otherwise it is printed in ``long long`` (every variable cast, every
literal ``LL``); one that does not fit in 64 bits either is refused (``IndexRangeError``)
with a hint to bound the sizes by a context.

Sizes are ``int`` arguments of the kernels and the launcher: their range is at most
[1, 2^31 - 1], narrowed by the program's context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from polymap.errors import CodegenError, InternalError
from polymap.ir.nodes import IBin, IConst, IndexExpr, IndexOp, INeg, IVar

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SIZE_MAX = INT32_MAX  # sizes are passed as ``int``


class IndexRangeError(CodegenError):
    """An index or loop expression may exceed 64-bit integers for some size of the context."""


@dataclass(frozen=True, slots=True)
class Interval:
    """The closed integer interval [lo, hi]; None is an infinite end."""

    lo: int | None
    hi: int | None

    @staticmethod
    def point(value: int) -> Interval:
        return Interval(value, value)

    def within(self, lo: int, hi: int) -> bool:
        return self.lo is not None and self.hi is not None and lo <= self.lo and self.hi <= hi

    @property
    def fits32(self) -> bool:
        return self.within(INT32_MIN, INT32_MAX)

    @property
    def fits64(self) -> bool:
        return self.within(INT64_MIN, INT64_MAX)

    def __add__(self, other: Interval) -> Interval:
        return Interval(_add(self.lo, other.lo), _add(self.hi, other.hi))

    def __neg__(self) -> Interval:
        return Interval(None if self.hi is None else -self.hi, None if self.lo is None else -self.lo)

    def __sub__(self, other: Interval) -> Interval:
        return self + (-other)

    def __mul__(self, other: Interval) -> Interval:
        if None in (self.lo, self.hi, other.lo, other.hi):
            if self == Interval.point(0) or other == Interval.point(0):
                return Interval.point(0)
            return Interval(None, None)
        corners = [a * b for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return Interval(min(corners), max(corners))

    def floordiv(self, d: int) -> Interval:
        """Floor division by a positive constant (monotone)."""
        if d <= 0:
            raise InternalError(f"floor division by {d} in an index expression")
        return Interval(None if self.lo is None else self.lo // d, None if self.hi is None else self.hi // d)

    def mod(self, d: int) -> Interval:
        """``x mod d`` for a positive constant d (the floor modulo, in [0, d))."""
        if d <= 0:
            raise InternalError(f"modulo by {d} in an index expression")
        if self.lo is not None and self.hi is not None and self.lo // d == self.hi // d:
            return Interval(self.lo % d, self.hi % d)
        return Interval(0, d - 1)

    def rem(self, d: int) -> Interval:
        """C's truncating remainder by a positive constant: the sign of the dividend."""
        lo = 0 if self.lo is not None and self.lo >= 0 else -(d - 1)
        hi = 0 if self.hi is not None and self.hi <= 0 else d - 1
        return Interval(lo, hi)

    def join(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)

    def max_with(self, other: Interval) -> Interval:
        lo = _max(self.lo, other.lo, low=True)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)

    def min_with(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = _max(self.hi, other.hi, low=False)
        return Interval(lo, hi)


BOOL = Interval(0, 1)


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _max(a: int | None, b: int | None, *, low: bool) -> int | None:
    """max of two lower ends (low) or min of two upper ends, None being infinite."""
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b) if low else min(a, b)


def set_ranges(s: isl.Set) -> dict[str, Interval]:
    """The range of every parameter and set dimension of ``s`` over all of its points and
    parameter values, by name (isl's exact minimum and maximum; an unbounded end is None).
    An empty set gives the point 0 for every name: nothing is evaluated there."""
    n_param = s.dim(isl.dim_type.param)
    n_set = s.dim(isl.dim_type.set)
    names = [s.get_dim_name(isl.dim_type.param, k) for k in range(n_param)]
    names += [s.get_dim_name(isl.dim_type.set, k) for k in range(n_set)]
    if s.is_empty():
        return {name: Interval.point(0) for name in names if name}
    flat = s.move_dims(isl.dim_type.set, 0, isl.dim_type.param, 0, n_param)
    out = {}
    for k, name in enumerate(names):
        if not name:
            continue
        out[name] = Interval(_finite(flat.dim_min_val(k)), _finite(flat.dim_max_val(k)))
    return out


def _finite(v: isl.Val) -> int | None:
    if v.is_infty() or v.is_neginfty() or v.is_nan():
        return None
    return int(v.to_python())


def size_box(size_names: tuple[str, ...], context: isl.Set) -> isl.Set:
    """The context with every size in ``int``'s range (sizes are ``int`` arguments)."""
    if not size_names:
        return context
    cons = " and ".join(f"{INT32_MIN} <= {n} <= {SIZE_MAX}" for n in size_names)
    box = isl.Set(f"[{', '.join(size_names)}] -> {{ : {cons} }}")
    return context.intersect_params(box)


def index_interval(e: IndexExpr, ranges: Mapping[str, Interval]) -> Interval:
    """The interval of an IR index expression, its variables (by user name) in ``ranges``."""
    if isinstance(e, IConst):
        return Interval.point(e.value)
    if isinstance(e, IVar):
        if e.name not in ranges:
            raise InternalError(f"no range known for '{e.name}'")
        return ranges[e.name]
    if isinstance(e, INeg):
        return -index_interval(e.operand, ranges)
    if isinstance(e, IBin):
        a, b = index_interval(e.lhs, ranges), index_interval(e.rhs, ranges)
        if e.op is IndexOp.ADD:
            return a + b
        if e.op is IndexOp.SUB:
            return a - b
        if e.op is IndexOp.MUL:
            return a * b
        if e.op is IndexOp.MIN:
            return a.min_with(b)
        if e.op is IndexOp.MAX:
            return a.max_with(b)
        if b.lo is None or b.lo != b.hi:
            raise InternalError(f"index expression {e} divides by a non-constant")
        return a.floordiv(b.lo) if e.op is IndexOp.FLOORDIV else a.mod(b.lo)
    raise InternalError(f"unknown index expression {e!r}")


def index_intervals(e: IndexExpr, ranges: Mapping[str, Interval]) -> list[Interval]:
    """The interval of ``e`` and of each of its sub-expressions."""
    out = [index_interval(e, ranges)]
    if isinstance(e, INeg):
        out += index_intervals(e.operand, ranges)
    elif isinstance(e, IBin):
        out += index_intervals(e.lhs, ranges) + index_intervals(e.rhs, ranges)
    return out


def require64(interval: Interval, what: str) -> None:
    if not interval.fits64:
        raise IndexRangeError(
            f"{what} may exceed 64-bit integers for the sizes allowed (range {_show(interval)}); "
            "bound the sizes with a context (e.g. --context 'N <= 1000000')"
        )


def _show(i: Interval) -> str:
    return f"[{'-inf' if i.lo is None else i.lo}, {'inf' if i.hi is None else i.hi}]"


__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "IndexRangeError",
    "Interval",
    "index_interval",
    "index_intervals",
    "require64",
    "set_ranges",
    "size_box",
]
