"""Arithmetic operations of a statement instance: what the cost model's FP32 roof charges and
what decides whether a host run is practical at a program's sizes."""

from __future__ import annotations

from polymap.ir.nodes import Anchor, Assign, Binary, Call, Neg, ValueExpr


def statement_flops(stmt: Assign | Anchor) -> int:
    """Arithmetic operations of one instance (each + - * / call, and the update of op=)."""
    own = 1 if isinstance(stmt, Assign) and stmt.op.is_update else 0
    return own + _ops(stmt.value)


def _ops(expr: ValueExpr) -> int:
    if isinstance(expr, Binary):
        return 1 + _ops(expr.lhs) + _ops(expr.rhs)
    if isinstance(expr, Neg):
        return 1 + _ops(expr.operand)
    if isinstance(expr, Call):
        return 1 + sum(_ops(a) for a in expr.args)
    return 0
