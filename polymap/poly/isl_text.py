"""IR index expressions as isl syntax, and user names as isl-safe identifiers.

The polyhedral model is built from isl's text syntax, which is short and readable
(``[N] -> { S0[i] -> A[1 + i] : 0 <= i < N }``). Two things need care:

* isl's parser treats some words as keywords, case-insensitively (``and``, ``mod``,
  ``floor``, ``min``, ...), so a buffer or size named ``max`` must be renamed;
  :class:`IslNames` does that and keeps every other name as the user wrote it.
* isl accepts a product only as ``integer * (expr)``, floor division only as
  ``floor((expr)/integer)`` and modulo as ``(expr) mod integer``; :func:`isl_expr` prints
  exactly those forms and refuses anything that is not quasi-affine with
  :class:`NonAffine`, which the model turns into a located ``NotAffineError``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from polymap.errors import InternalError
from polymap.ir.nodes import Gather, IConst, IndexExpr, IndexOp, INeg, IVar, index_vars

# Words isl's lexer reads as keywords (it compares them case-insensitively).
ISL_KEYWORDS = frozenset(
    ("exists", "and", "or", "implies", "not", "infty", "infinity", "nan", "min", "max")
    + ("rat", "true", "false", "ceild", "floord", "mod", "ceil", "floor")
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def is_isl_safe(name: str) -> bool:
    """Whether ``name`` can be used verbatim as an isl identifier."""
    return bool(_IDENT.match(name)) and name.lower() not in ISL_KEYWORDS


class IslNames:
    """An injective, stable map from user names to isl identifiers.

    A user name keeps its spelling when it is a safe isl identifier and not yet taken;
    otherwise it gets a suffix (``max`` -> ``max_``, a second ``T`` -> ``T_1``).
    Every name handed out is distinct, whatever namespace it is used in (sizes, loop
    indices, statement and buffer tuples), so no isl text can confuse one for another.
    """

    def __init__(self) -> None:
        self._isl: dict[str, str] = {}
        self._user: dict[str, str] = {}

    def __getitem__(self, user: str) -> str:
        """The isl name of ``user``, allocated on first use."""
        if user not in self._isl:
            isl_name = self.fresh(user)
            self._isl[user] = isl_name
        return self._isl[user]

    def fresh(self, hint: str) -> str:
        """A new isl name, never handed out before, that reads like ``hint``."""
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
        if not re.match(r"[A-Za-z_]", base):
            base = "v" + base
        candidates = [base] if is_isl_safe(base) else []
        candidates.append(base + "_")
        for name in candidates:
            if name not in self._user:
                break
        else:
            k = 1
            while f"{base}_{k}" in self._user:
                k += 1
            name = f"{base}_{k}"
        self._user[name] = hint
        return name

    def user(self, isl_name: str) -> str:
        """The user name behind an isl name (the name itself if it was never mapped)."""
        return self._user.get(isl_name, isl_name)


class NonAffine(Exception):
    """An index expression is not quasi-affine.

    ``expr`` is the offending sub-expression, ``reason`` says why in words, and
    ``params`` names the size parameters whose binding would make it affine."""

    def __init__(self, expr: IndexExpr, reason: str, params: tuple[str, ...] = ()) -> None:
        self.expr = expr
        self.reason = reason
        self.params = params
        super().__init__(f"{expr}: {reason}")


def const_value(expr: IndexExpr) -> int | None:
    """The value of an expression without variables (``2 * 3 + 1``), else None."""
    if isinstance(expr, IConst):
        return expr.value
    if isinstance(expr, IVar):
        return None
    if isinstance(expr, INeg):
        inner = const_value(expr.operand)
        return None if inner is None else -inner
    a, b = const_value(expr.lhs), const_value(expr.rhs)
    if a is None or b is None:
        return None
    if expr.op in (IndexOp.FLOORDIV, IndexOp.MOD) and b <= 0:
        return None
    return expr.op.apply(a, b)


def evaluate_index(expr: IndexExpr, values: Mapping[str, int]) -> int:
    """Evaluate an index expression; ``//`` and ``%`` round toward minus infinity, as isl."""
    if isinstance(expr, IConst):
        return expr.value
    if isinstance(expr, IVar):
        return values[expr.name]
    if isinstance(expr, INeg):
        return -evaluate_index(expr.operand, values)
    return expr.op.apply(evaluate_index(expr.lhs, values), evaluate_index(expr.rhs, values))


def shown_index(expr, values: Mapping[str, int]) -> str:
    """An index of an access at a point, for messages: its value, or for a gathered index
    the element it is read from (``ids[3]``), whose value only a run knows."""
    if isinstance(expr, Gather):
        source = expr.source
        inner = ", ".join(str(evaluate_index(e, values)) for e in source.indices)
        return f"{source.buffer}[{inner}]" if source.indices else source.buffer
    return str(evaluate_index(expr, values))


def access_tuple(
    indices, shape, names: Mapping[str, str], params: Collection[str], fresh
) -> tuple[list[str], list[str]]:
    """The isl expressions of an access's indices and the constraints they need: a gathered
    index is a fresh variable (``fresh(k)`` names the one of position k) over the whole
    dimension, ``0 <= g < extent``, whatever the value read at run time will be."""
    exprs, ranges = [], []
    for k, e in enumerate(indices):
        if isinstance(e, Gather):
            exprs.append(fresh(k))
            ranges.append(f"0 <= {exprs[-1]} < {isl_expr(shape[k], names, params)}")
        else:
            exprs.append(isl_expr(e, names, params))
    return exprs, ranges


def isl_expr(expr: IndexExpr, names: Mapping[str, str], params: Collection[str] = ()) -> str:
    """Print a quasi-affine index expression in isl syntax.

    ``names`` maps every variable the expression may mention to its isl name; ``params``
    lists which of them are size parameters (only used to say, when the expression is not
    affine, which sizes would make it affine once bound). Raises :class:`NonAffine`.
    """
    value = const_value(expr)
    if value is not None:
        return str(value)
    if isinstance(expr, IVar):
        try:
            return names[expr.name]
        except KeyError:
            raise InternalError(f"index expression mentions '{expr.name}', which is not in scope") from None
    if isinstance(expr, INeg):
        return f"-({isl_expr(expr.operand, names, params)})"
    op = expr.op
    if op in (IndexOp.ADD, IndexOp.SUB):
        lhs, rhs = isl_expr(expr.lhs, names, params), isl_expr(expr.rhs, names, params)
        return f"({lhs}) {op.value} ({rhs})"
    if op.is_call:  # isl takes min and max as piecewise affine
        lhs, rhs = isl_expr(expr.lhs, names, params), isl_expr(expr.rhs, names, params)
        return f"{op.value}({lhs}, {rhs})"
    if op is IndexOp.MUL:
        # isl reads a product only with a bare integer literal on the left.
        for const_side, other in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
            c = const_value(const_side)
            if c is not None:
                return f"{c}*({isl_expr(other, names, params)})"
        raise NonAffine(expr, "a product of two non-constant factors", _bindable(expr.lhs, expr.rhs, params))
    divisor = const_value(expr.rhs)
    if divisor is None:
        what = "floor division" if op is IndexOp.FLOORDIV else "modulo"
        raise NonAffine(expr, f"{what} by a non-constant", _bindable(expr.rhs, None, params))
    if divisor <= 0:
        what = "floor division" if op is IndexOp.FLOORDIV else "modulo"
        raise NonAffine(expr, f"{what} by {divisor}, which is not positive")
    inner = isl_expr(expr.lhs, names, params)
    if op is IndexOp.FLOORDIV:
        return f"floor(({inner})/{divisor})"
    return f"({inner}) mod {divisor}"


def _bindable(a: IndexExpr, b: IndexExpr | None, params: Collection[str]) -> tuple[str, ...]:
    """The sizes to bind so that one factor (or the divisor) becomes a constant: the sizes
    of every side that mentions sizes only. Empty when binding sizes cannot help (``i * i``)."""
    found: set[str] = set()
    for side in (a, b):
        if side is None:
            continue
        names = index_vars(side)
        if names and names <= set(params):
            found |= names
    return tuple(sorted(found))


def condition_isl(cond, names: Mapping[str, str], params: Collection[str] = ()) -> str:
    """A condition over index values (an ``assume``) in isl syntax."""
    from polymap.ir.nodes import CmpOp, Compare, Logic, Not

    if isinstance(cond, Not):
        return f"not ({condition_isl(cond.operand, names, params)})"
    if isinstance(cond, Logic):
        lhs, rhs = (condition_isl(c, names, params) for c in (cond.lhs, cond.rhs))
        return f"({lhs}) {cond.op.value} ({rhs})"
    assert isinstance(cond, Compare)
    op = "=" if cond.op is CmpOp.EQ else cond.op.value
    return f"{isl_expr(cond.lhs.expr, names, params)} {op} {isl_expr(cond.rhs.expr, names, params)}"
