"""Arithmetic operations of a statement instance: what the cost model's FP32 roof charges and
what decides whether a host run is practical at a program's sizes."""

from __future__ import annotations

from polymap.ir.nodes import Anchor, Assign, Condition, Not, ValueExpr, value_children


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
