"""Arithmetic operations of a statement instance: what the cost model's FP32 roof charges and
what decides whether a host run is practical at a program's sizes; and the arithmetic
instructions they take, what its issue roof charges."""

from __future__ import annotations

from collections.abc import Callable

from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    Binary,
    Condition,
    Const,
    DType,
    IndexValue,
    Not,
    ValueExpr,
    ValueOp,
    value_children,
)
from polymap.ir.value_types import statement_type, value_type


def statement_flops(stmt: Assign | Anchor) -> int:
    """Arithmetic operations of one instance (each + - * / call, comparison and select, and
    the update of op=)."""
    own = 1 if isinstance(stmt, Assign) and stmt.op.is_update else 0
    return own + _ops(stmt.value)


def _ops(expr: ValueExpr | Condition) -> int:
    """One per operator, call, comparison and select (``not`` folds into what it negates)."""
    own = 0 if isinstance(expr, Not) else 1
    children = value_children(expr)
    return own + sum(_ops(c) for c in children) if children else 0


def statement_instructions(stmt: Assign | Anchor, dtype_of: Callable[[str], DType]) -> int:
    """Arithmetic instructions of one instance at best, what the cost model's issue roof
    charges (``statement_flops`` counts operations for the FP32 roof): one per operation,
    less one per multiplication that an addition or subtraction (the update of ``+=``/``-=``
    included) takes as an operand, since the two make one FMA (or IMAD), plus one per
    integer value a float operation takes (a conversion the compiler makes before it computes:
    ``(W[k, n] - zero[n]) * scale[n]`` with a u8 ``W`` is a subtraction, a conversion and a
    multiplication). Loads and their own conversions (a 16-bit float's) are the accesses'."""
    context = statement_type(stmt, dtype_of)
    count = _instructions(stmt.value, context, dtype_of)
    if isinstance(stmt, Assign) and stmt.op.is_update:
        count += 1
        # the update adds in the target's type: an integer value is converted first
        converted = (
            dtype_of(stmt.buffer).compute.is_float and value_type(stmt.value, context, dtype_of).is_integer
        )
        fused = (
            stmt.op in (AssignOp.ADD, AssignOp.SUB)
            and not converted  # an integer product converted, then added
            and _is_fused_product(stmt.value, context, dtype_of)
        )
        count += (1 if converted else 0) - (1 if fused else 0)
    return count


def _instructions(expr: ValueExpr | Condition, context: DType, dtype_of) -> int:
    """``_ops`` with multiply-adds fused and integer operands of float operations converted
    (``statement_instructions``)."""
    children = value_children(expr)
    if not children:
        return 0
    count = sum(_instructions(c, context, dtype_of) for c in children)
    if isinstance(expr, Not):
        return count
    count += 1
    if isinstance(expr, Binary) and not expr.op.is_bitwise:
        if value_type(expr, context, dtype_of).is_float:
            for child in (expr.lhs, expr.rhs):
                if not isinstance(child, Const) and _is_integer(child, context, dtype_of):
                    count += 1  # converted to float before the operation
        if expr.op in (ValueOp.ADD, ValueOp.SUB) and any(
            _is_fused_product(c, context, dtype_of) for c in (expr.lhs, expr.rhs)
        ):
            count -= 1  # a * b + c: one FMA (IMAD)
    return count


def _is_integer(expr: ValueExpr, context: DType, dtype_of) -> bool:
    """Whether ``expr`` computes in an integer type (an index value: where its context is
    a float, the printer converts it, so it counts as one too)."""
    if isinstance(expr, IndexValue):
        return True
    return value_type(expr, context, dtype_of).is_integer


def _is_fused_product(expr: ValueExpr, context: DType, dtype_of) -> bool:
    """Whether ``expr`` is a multiplication an addition of its type fuses with: an FMA of
    floats, an IMAD of 32-bit integers (a 64-bit one takes several instructions anyway)."""
    return (
        isinstance(expr, Binary)
        and expr.op is ValueOp.MUL
        and value_type(expr, context, dtype_of) in (DType.F32, DType.F64, DType.I32)
    )
