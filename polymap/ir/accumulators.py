"""Updates that give the same result in any order: what lets a reduction be spread over the
lanes of a warp (``mapping.lanes``) or split into parts (``transform.split``).

An *accumulator* is a buffer element whose every access in a loop is an update ``acc op= e``
by one operator ``op`` in ``+= *= max= min=``, where ``e`` does not read it, of a compute
type (``f32 f64 i32 i64``: no narrow storage rounds or wraps a partial result differently
from the whole). ``max=``/``min=`` and integer ``+=``/``*=`` are exact in any order
(integers wrap alike); an integer accumulator qualifies only where its statement computes in
an integer type and its value is an integer (``R += X`` with an f64 ``X`` into an i32 ``R``
truncates on each update, so the order matters), and a ``max=``/``min=`` only from a type
no wider than the accumulator's. A float ``+=``/``*=`` changes the order of the sum: the
caller allows it only with ``reassociate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    Const,
    DType,
    IndexValue,
    Neg,
    Read,
    Select,
    operand_reads,
)
from polymap.ir.value_types import promote, statement_type

COMBINABLE = (AssignOp.ADD, AssignOp.MUL, AssignOp.MAX, AssignOp.MIN)
EXACT_IN_ANY_ORDER = (AssignOp.MAX, AssignOp.MIN)
# x op x == x: every lane of a spread loop may start such an accumulator from lane 0's value
# (the others start at the operator's identity, which only += and *= have among COMBINABLE)
IDEMPOTENT = (AssignOp.MAX, AssignOp.MIN)
COMBINED_TYPES = (DType.F32, DType.F64, DType.I32, DType.I64)


def accumulated(
    name: str, stmts: Iterable[Assign | Anchor], decl: BufferDecl, dtype_of: Callable[[str], DType]
) -> AssignOp | None:
    """The operator of ``name`` as an accumulator of the statements ``stmts`` (every access
    of it an update by that one operator whose value does not read it, see the module
    docstring); None if it is no accumulator. ``decl``: its declaration (its shape is not
    looked at: the caller says which element), ``dtype_of``: a buffer's storage type."""
    if decl.dtype not in COMBINED_TYPES:
        return None
    ops = set()
    for stmt in stmts:
        reads_it = any(r.buffer == name for r in operand_reads(stmt))
        if isinstance(stmt, Assign) and stmt.buffer == name:
            if stmt.op not in COMBINABLE or reads_it or stmt.is_atomic:
                return None  # (an atomic update's element is other threads' too)
            if decl.dtype.is_integer and not _exact_integer_update(stmt, decl.dtype, dtype_of):
                return None
            ops.add(stmt.op)
        elif reads_it:
            return None
    return ops.pop() if len(ops) == 1 else None


def reorders(op: AssignOp, dtype: DType) -> bool:
    """Whether combining updates ``op`` of a ``dtype`` accumulator in another order can change
    the result (a float ``+=`` or ``*=``: allowed only with ``reassociate``)."""
    return op not in EXACT_IN_ANY_ORDER and dtype.is_float


def _integer_valued(e, dtype_of) -> bool:
    """Whether a value is an integer whatever it reads: an integer accumulator then wraps the
    same way in any order, where a float value converted on every update (``R += X`` with an
    f64 X into an i32 R truncates each step) would not."""
    if isinstance(e, Read):
        return dtype_of(e.buffer).compute.is_integer
    if isinstance(e, Const):
        return float(e.value).is_integer()
    if isinstance(e, IndexValue):
        return True
    if isinstance(e, Neg):
        return _integer_valued(e.operand, dtype_of)
    if isinstance(e, Binary):
        return _integer_valued(e.lhs, dtype_of) and _integer_valued(e.rhs, dtype_of)
    if isinstance(e, Select):
        return _integer_valued(e.then, dtype_of) and _integer_valued(e.otherwise, dtype_of)
    return False  # a call: a float function, or a conversion; kept in one thread


def _exact_integer_update(stmt: Assign, dtype: DType, dtype_of) -> bool:
    """Whether ``acc op= value`` on an integer accumulator gives the same result in any
    order: the statement computes in an integer type (every buffer whose value reaches it
    is an integer: ``statement_type``; a select's condition only chooses) and its value is
    an integer; for
    ``max=``/``min=`` that type is no wider than the accumulator's (a value wider than it,
    truncated on each update, makes the order matter; ``+=`` and ``*=`` wrap alike)."""
    computes = statement_type(stmt, dtype_of)
    if not computes.is_integer or not _integer_valued(stmt.value, dtype_of):
        return False
    return stmt.op not in EXACT_IN_ANY_ORDER or promote(dtype, computes) is dtype.compute
