"""The value typing of the language, one set of rules for the reference executor
(``polymap/reference.py``) and the C printer (``polymap/codegen/cexpr.py``), so that the
emitted code computes what the ground truth computes (docs/language.md, "Value typing").

Values compute in one of four *compute types*, ordered as C's usual arithmetic conversions
order them: ``i32 < i64 < f32 < f64``. A buffer of a storage type (``f16 bf16 i8 u8 bool``)
is read as its compute type (``DType.compute``: f32 for the floats, i32 for the others) and
stored by rounding or converting back (``Fn.cast``'s rules).
"""

from __future__ import annotations

from collections.abc import Callable

from polymap.ir.nodes import (
    Anchor,
    Assign,
    Binary,
    Call,
    Compare,
    Const,
    DType,
    Fn,
    IndexValue,
    Neg,
    Read,
    Select,
    ValueExpr,
    result_reads,
    value_reads,
)

_RANK = {DType.I32: 0, DType.I64: 1, DType.F32: 2, DType.F64: 3}


def promote(*dtypes: DType) -> DType:
    """The type two or more values compute in together: the widest of their compute types."""
    return max((d.compute for d in dtypes), key=_RANK.__getitem__)


def statement_type(stmt: Assign | Anchor, dtype_of: Callable[[str], DType]) -> DType:
    """A statement's *computation type*: the promotion of the buffers whose values flow
    into its value (``result_reads``: not those a gathered index is read from, nor those of
    a select's condition), else the compute type of the buffer it writes (f32 for an anchor
    that reads none). Literals and index values take it, except inside a comparison
    (``comparison_type``) and a bitwise operation (``bitwise_type``)."""
    read = [dtype_of(r.buffer) for r in result_reads(stmt.value)]
    if read:
        return promote(*read)
    return dtype_of(stmt.buffer).compute if isinstance(stmt, Assign) else DType.F32


def comparison_type(cmp: Compare, outer: DType, dtype_of: Callable[[str], DType]) -> DType:
    """The type a comparison's literals and index values take: the promotion of the buffers
    whose values reach its two operands (``result_reads``: a nested select's condition only
    chooses), else ``outer`` (the statement's or the predicate's type). So ``k[i] ==
    16777217`` compares in i32 beside an f32 read elsewhere, and ``d[i] > 0.1`` with an f64
    ``d`` in f64 in a statement that computes in i32. The comparison itself is made in the
    promotion of its two operands."""
    read = [dtype_of(r.buffer) for r in (*result_reads(cmp.lhs), *result_reads(cmp.rhs))]
    return promote(*read) if read else outer


def predicate_type(stmt: Assign | Anchor, dtype_of: Callable[[str], DType]) -> DType:
    """The type a statement's predicate (``Assign.predicate``, an if's condition on data)
    computes in: the promotion of the buffers it reads, as a statement's own type is of the
    buffers its value reads (its literals take it: ``k[i] == 16777217`` on an i32 ``k``
    compares in i32 whatever the statement stores). It does not enter ``statement_type``."""
    read = [dtype_of(r.buffer) for r in value_reads(stmt.predicate)] if stmt.predicate is not None else []
    return promote(*read) if read else statement_type(stmt, dtype_of)


def literal_type(value: float, compute: DType) -> DType:
    """A literal's type in a statement computing in ``compute``: that type, except that a
    literal with a fraction among integers is f32 (as in C, ``2 * 2.5`` is 5.0)."""
    if compute.is_integer and not float(value).is_integer():
        return DType.F32
    return compute


def value_type(expr: ValueExpr, context: DType, dtype_of: Callable[[str], DType]) -> DType:
    """The type ``expr`` computes in where its literals and index values take ``context``
    (a statement's type; a bitwise operation's own below it), by the rules the reference
    and the C printer follow."""
    if isinstance(expr, Const):
        return literal_type(expr.value, context)
    if isinstance(expr, IndexValue):
        return context
    if isinstance(expr, Read):
        return dtype_of(expr.buffer).compute
    if isinstance(expr, Neg):
        return value_type(expr.operand, context, dtype_of)
    if isinstance(expr, Binary):
        if expr.op.is_bitwise:
            return bitwise_type(expr, dtype_of)
        return promote(value_type(expr.lhs, context, dtype_of), value_type(expr.rhs, context, dtype_of))
    if isinstance(expr, Select):
        return promote(
            value_type(expr.then, context, dtype_of), value_type(expr.otherwise, context, dtype_of)
        )
    if isinstance(expr, Call):
        if expr.fn.cast is not None:
            return expr.fn.cast.compute
        args = [value_type(a, context, dtype_of) for a in expr.args]
        if expr.fn in (Fn.ABS, Fn.FLOOR, Fn.CEIL, Fn.MAX, Fn.MIN):
            return promote(*args)
        return float_type(promote(*args))
    raise TypeError(f"not a value expression: {expr!r}")


def bitwise_type(expr: Binary, dtype_of: Callable[[str], DType]) -> DType:
    """The type a bitwise operation (``& | ^ << >>``) computes in, and its literals and
    index values take in place of the statement's: the promotion of its operands' types
    with each literal counted as i32, the narrowest integer (``W[k] >> 4`` with a u8 ``W``
    is i32 in an f32 statement too). A float here is a type error (``validate``). Below a
    conversion literals take the statement's type again, and inside a comparison its
    ``comparison_type`` (the reference's ``_Eval.in_type``, the printer's and the
    oracle's ``root``)."""
    return promote(value_type(expr.lhs, DType.I32, dtype_of), value_type(expr.rhs, DType.I32, dtype_of))


def float_type(dtype: DType) -> DType:
    """The type ``exp log sqrt ...`` compute in for an argument of ``dtype``: f32 for an
    integer."""
    return DType.F32 if dtype.compute.is_integer else dtype.compute


def integer_range(dtype: DType) -> tuple[int, int]:
    """The values of an integer compute type."""
    bits = 64 if dtype.compute is DType.I64 else 32
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
