"""The IR: a frozen tree of par/seq loop nests over buffers (seed 003's TE language).

Semantics (``shared/design/ARCHITECTURE.md``, "IR semantics"):

* ``par N i { body }``: the N iterations are independent; they start together and are
  joined at the end, so every write inside is visible after the loop.
* ``seq N i { body }``: the iterations run in order.
* Statements of a block run in textual order. Extents are index expressions over the size
  parameters and the enclosing loop indices (triangular domains are allowed).
* Index expressions are quasi-affine: ``+ -``, multiplication by a constant, floor division
  and modulo by a positive constant.

Every node is a frozen, slotted dataclass with tuple fields: equal by value (source
positions do not take part in equality), hashable and safe to share. Transformations
return new trees.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field, replace

import numpy as np

from polymap.errors import SourceLoc

# --------------------------------------------------------------------------- enums


class DType(enum.Enum):
    """Element type of a buffer. ``f16``, ``bf16``, ``i8``, ``u8`` and ``bool`` are *storage*
    types: a read gives the value in its ``compute`` type (f32 for the two floats, i32 for
    the others), and a store rounds or converts it back (``polymap/ir/value_types.py``)."""

    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    I8 = "i8"
    U8 = "u8"
    I32 = "i32"
    I64 = "i64"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        if self is DType.BF16:
            # NumPy has no bfloat16: ml_dtypes (the JAX team's NumPy extension types) does,
            # with round-to-nearest-even conversions, the rounding of the emitted code
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(_NUMPY_TYPES[self.value])

    @property
    def is_float(self) -> bool:
        return self in (DType.F16, DType.BF16, DType.F32, DType.F64)

    @property
    def is_integer(self) -> bool:
        """An integer type (``bool`` is one: its values are 0 and 1)."""
        return not self.is_float

    @property
    def compute(self) -> DType:
        """The type a read of this type gives, in which values are computed."""
        return _COMPUTE.get(self, self)

    @property
    def is_storage(self) -> bool:
        """Stored narrower than it computes: reads widen, stores round or convert."""
        return self.compute is not self

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize


_NUMPY_TYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i8": np.int8,
    "u8": np.uint8,
    "i32": np.int32,
    "i64": np.int64,
    "bool": np.bool_,
}
_COMPUTE = {
    DType.F16: DType.F32,
    DType.BF16: DType.F32,
    DType.I8: DType.I32,
    DType.U8: DType.I32,
    DType.BOOL: DType.I32,
}


# the types a scatter may update: those the GPU has atomics (or a compare-and-swap loop) for
ATOMIC_TYPES = (DType.I32, DType.I64, DType.F32, DType.F64)


class BufferKind(enum.Enum):
    """How a buffer meets the outside world."""

    IN = "in"  # given by the caller, read only
    OUT = "out"  # returned to the caller; starts as zeros in the reference executor
    INOUT = "inout"  # given by the caller, read and written, returned
    NEW = "new"  # temporary: program-wide at top level, block-local inside a block


class LoopKind(enum.Enum):
    PAR = "par"
    SEQ = "seq"


class AssignOp(enum.Enum):
    """``target op= value``; ``SET`` is plain assignment."""

    SET = "="
    ADD = "+="
    SUB = "-="
    MUL = "*="
    DIV = "/="  # true division for floats, C's (toward zero) for i32, as ``/``
    MAX = "max="
    MIN = "min="

    @property
    def is_update(self) -> bool:
        """Whether the old value of the target is read (everything but plain ``=``)."""
        return self is not AssignOp.SET

    def commutes_atomically_with(self, other: AssignOp) -> bool:
        """Whether atomic updates by ``self`` and by ``other`` of one element give one result
        in either order: one operator, or ``+=`` and ``-=`` (both add, ``-=`` the negation;
        exactly for integers, up to rounding for floats, as any two float atomics)."""
        additive = (AssignOp.ADD, AssignOp.SUB)
        return self is other or (self in additive and other in additive)


# the updates a scatter (``Assign.is_scatter``) may make: each is one atomic operation of
# the GPU on the target's type (``-=`` adds the negation), so instances that meet on an
# element commute; exactly so for integers, up to rounding order for floats (allowed only
# with ``deterministic=False``)
ATOMIC_OPS = frozenset({AssignOp.ADD, AssignOp.SUB, AssignOp.MAX, AssignOp.MIN})


class IndexOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    FLOORDIV = "//"  # floor division; ``/`` in index context means the same
    MOD = "%"  # modulo with the sign of the (positive) divisor, as isl's ``mod``
    # min(a, b) and max(a, b): piecewise affine, in loop extents, shapes and conditions
    # (isl takes them as such); not in an access's indices
    MIN = "min"
    MAX = "max"

    @property
    def is_call(self) -> bool:
        """Written as a call, ``min(a, b)``, not infix."""
        return self in (IndexOp.MIN, IndexOp.MAX)

    def apply(self, a: int, b: int) -> int:
        """``a op b`` of two integers, as isl computes it: ``//`` and ``%`` round toward
        minus infinity (Python's, for the positive divisors an index may have)."""
        return _INDEX_APPLY[self](a, b)


_INDEX_APPLY = {
    IndexOp.ADD: operator.add,
    IndexOp.SUB: operator.sub,
    IndexOp.MUL: operator.mul,
    IndexOp.FLOORDIV: operator.floordiv,
    IndexOp.MOD: operator.mod,
    IndexOp.MIN: min,
    IndexOp.MAX: max,
}


class ValueOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # true division for floats, C division (toward zero) for i32
    MOD = "%"  # floored: the sign of the divisor, as NumPy's mod (C's fmod and % truncate)
    # bitwise, of integers only (two's complement); ``~x`` is ``x ^ -1``
    BITAND = "&"
    BITOR = "|"
    BITXOR = "^"
    # a shift by a count outside 0..bits-1 gives 0 (<<) or the sign (>>), as NumPy's and
    # the GPU's shifts do; C leaves it undefined, so the emitted code tests the count
    SHL = "<<"
    SHR = ">>"  # arithmetic: the sign fills in

    @property
    def is_bitwise(self) -> bool:
        """An operation of integers only, whose literals take its own type
        (``value_types.bitwise_type``)."""
        return self in _BITWISE


_BITWISE = frozenset({ValueOp.BITAND, ValueOp.BITOR, ValueOp.BITXOR, ValueOp.SHL, ValueOp.SHR})


class CmpOp(enum.Enum):
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="

    def holds(self, a, b):
        """``a op b`` of two numbers (a bool), or elementwise of NumPy arrays."""
        return _COMPARE[self](a, b)


_COMPARE = {
    CmpOp.LT: operator.lt,
    CmpOp.LE: operator.le,
    CmpOp.GT: operator.gt,
    CmpOp.GE: operator.ge,
    CmpOp.EQ: operator.eq,
    CmpOp.NE: operator.ne,
}


class LogicOp(enum.Enum):
    AND = "and"
    OR = "or"


class Fn(enum.Enum):
    MAX = "max"
    MIN = "min"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    ABS = "abs"
    TANH = "tanh"
    SIN = "sin"
    COS = "cos"
    ERF = "erf"
    RSQRT = "rsqrt"  # 1 / sqrt(x), rounded twice (not the GPU's approximate rsqrtf)
    SIGMOID = "sigmoid"  # 1 / (1 + exp(-x))
    FLOOR = "floor"
    CEIL = "ceil"
    POW = "pow"
    # the next float after x in the direction of y (C's nextafter): exact, so the reference,
    # the C library and the GPU agree bit for bit
    NEXTAFTER = "nextafter"
    # conversions, one per dtype: f32(x), i32(x), f16(x) ... convert a value as a store
    # into a buffer of that type does (float to an integer truncates toward zero, saturating,
    # NaN -> 0; an integer to a narrower one wraps; to bool: nonzero is 1), and give it in
    # the type's compute type (f16(x) is x rounded to f16, as an f32)
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    I8 = "i8"
    U8 = "u8"
    I32 = "i32"
    I64 = "i64"
    BOOL = "bool"

    @property
    def arity(self) -> int:
        return 2 if self in (Fn.MAX, Fn.MIN, Fn.POW, Fn.NEXTAFTER) else 1

    @property
    def cast(self) -> DType | None:
        """The type a conversion stores into; None for the other functions."""
        return _CASTS.get(self)


_CASTS = {Fn(dt.value): dt for dt in DType}


# --------------------------------------------------------------- index expressions

# Index arithmetic is exact in the model (isl) and 64-bit at most in the emitted C: an index
# constant outside this range cannot be printed as a C integer, nor held by NumPy's int64.
INDEX_MIN, INDEX_MAX = -(2**63), 2**63 - 1
# How deep expressions and loop nests may be. Every stage after parsing (lowering, validation,
# the isl text, the printer, the reference executor, the C printer) walks them recursively;
# these limits keep the deepest walk far below Python's recursion limit (1000 frames), with
# room for the caller's own stack. The parser reports a crossing at its line:col, validation
# for programs built in Python (and for einsum's implicit loops).
MAX_EXPR_NESTING = 100
MAX_LOOP_NESTING = 16
# How many dimensions a buffer may have. The reference executor holds a block-local buffer
# with one axis per enclosing loop as well, and NumPy allows at most 32 index arrays (64
# since NumPy 2): 16 + 16 stays within both, and keeps analyze within seconds.
MAX_RANK = 16


@dataclass(frozen=True, slots=True)
class IConst:
    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class IVar:
    """A loop index or a size parameter (which one is decided by scope)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class INeg:
    operand: IndexExpr

    def __str__(self) -> str:
        return f"-{_iparen(self.operand, 3)}"


@dataclass(frozen=True, slots=True)
class IBin:
    op: IndexOp
    lhs: IndexExpr
    rhs: IndexExpr

    def __str__(self) -> str:
        if self.op.is_call:
            return f"{self.op.value}({self.lhs}, {self.rhs})"
        prec = _INDEX_PREC[self.op]
        # Left-associative: the right operand needs parentheses at equal precedence.
        return f"{_iparen(self.lhs, prec)} {self.op.value} {_iparen(self.rhs, prec + 1)}"


IndexExpr = IConst | IVar | INeg | IBin

_INDEX_PREC = {
    IndexOp.ADD: 1,
    IndexOp.SUB: 1,
    IndexOp.MUL: 2,
    IndexOp.FLOORDIV: 2,
    IndexOp.MOD: 2,
    IndexOp.MIN: 3,  # a call: an atom
    IndexOp.MAX: 3,
}


def _iparen(expr: IndexExpr, prec: int) -> str:
    own = _INDEX_PREC[expr.op] if isinstance(expr, IBin) else 3
    if isinstance(expr, IConst) and expr.value < 0:
        own = 2  # "-3" reads as a negation
    return f"({expr})" if own < prec else str(expr)


def index_vars(expr: IndexExpr | Gather) -> frozenset[str]:
    """The names an index expression mentions (a gathered index: those of its source's
    indices)."""
    if isinstance(expr, Gather):
        return frozenset().union(*(index_vars(e) for e in expr.source.indices))
    if isinstance(expr, IVar):
        return frozenset((expr.name,))
    if isinstance(expr, INeg):
        return index_vars(expr.operand)
    if isinstance(expr, IBin):
        return index_vars(expr.lhs) | index_vars(expr.rhs)
    return frozenset()


def substitute_index(expr: IndexExpr, values: dict[str, IndexExpr]) -> IndexExpr:
    """Replace variables by expressions and fold constants (so ``i * N`` with N := 8
    becomes ``i * 8``); in a gathered index, in its source's indices."""
    if isinstance(expr, Gather):
        source = expr.source
        return Gather(
            Read(source.buffer, tuple(substitute_index(e, values) for e in source.indices), source.loc)
        )
    if isinstance(expr, IVar):
        return values.get(expr.name, expr)
    if isinstance(expr, INeg):
        inner = substitute_index(expr.operand, values)
        return IConst(-inner.value) if isinstance(inner, IConst) else INeg(inner)
    if isinstance(expr, IBin):
        return fold_index(
            IBin(expr.op, substitute_index(expr.lhs, values), substitute_index(expr.rhs, values))
        )
    return expr


def fold_index(expr: IBin) -> IndexExpr:
    """Fold a binary node whose operands are both constants; leave it otherwise."""
    if not (isinstance(expr.lhs, IConst) and isinstance(expr.rhs, IConst)):
        return expr
    a, b = expr.lhs.value, expr.rhs.value
    if expr.op in (IndexOp.FLOORDIV, IndexOp.MOD) and b <= 0:
        return expr  # left for the affinity check to report
    return IConst(expr.op.apply(a, b))


# --------------------------------------------------------------- value expressions


@dataclass(frozen=True, slots=True)
class Const:
    """A numeric literal; it takes the type of the values it meets (weakly typed)."""

    value: float | int
    loc: SourceLoc | None = field(default=None, compare=False)  # the literal in the text

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class Read:
    """``buffer[indices]``; a 0-d buffer has no indices. An index is an index expression or,
    in a read of a value (not a write's target), a ``Gather``."""

    buffer: str
    indices: tuple[IndexExpr | Gather, ...]
    loc: SourceLoc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        if not self.indices:
            return self.buffer  # a 0-d buffer reads as its bare name
        return f"{self.buffer}[{', '.join(map(str, self.indices))}]"


@dataclass(frozen=True, slots=True)
class Gather:
    """An index read from an integer buffer: ``I[i]`` in ``A[I[i], j]`` (a gather). It may
    stand only as a whole index of a read; ``source`` is a plain read (affine indices).

    The polyhedral model cannot know the value, so the access is a may-read of the whole
    indexed dimension (dependences stay sound) and ``source`` is a read of the statement of
    its own; no proof can bound the value, so the reference and the emitted code check it at
    run time (``BoundsError`` naming the buffer and the position)."""

    source: Read

    def __str__(self) -> str:
        return str(self.source)


def gathers_of(read: Read) -> tuple[tuple[int, Gather], ...]:
    """The gathered indices of a read, with their positions."""
    return tuple((k, e) for k, e in enumerate(read.indices) if isinstance(e, Gather))


@dataclass(frozen=True, slots=True)
class IndexValue:
    """A loop index or size parameter used as a value, e.g. ``X[i] = i``."""

    expr: IndexExpr

    def __str__(self) -> str:
        return str(self.expr)


@dataclass(frozen=True, slots=True)
class Neg:
    operand: ValueExpr

    def __str__(self) -> str:
        return f"-{_vparen(self.operand, _UNARY_PREC)}"


@dataclass(frozen=True, slots=True)
class Binary:
    op: ValueOp
    lhs: ValueExpr
    rhs: ValueExpr
    loc: SourceLoc | None = field(default=None, compare=False)  # the operator in the text

    def __str__(self) -> str:
        prec = _VALUE_PREC[self.op]
        return f"{_vparen(self.lhs, prec)} {self.op.value} {_vparen(self.rhs, prec + 1)}"


@dataclass(frozen=True, slots=True)
class Call:
    fn: Fn
    args: tuple[ValueExpr, ...]

    def __str__(self) -> str:
        return f"{self.fn.value}({', '.join(map(str, self.args))})"


@dataclass(frozen=True, slots=True)
class Compare:
    """``lhs op rhs`` of two values, compared in the promotion of their types: a condition
    (``Condition``), never a value of its own."""

    op: CmpOp
    lhs: ValueExpr
    rhs: ValueExpr

    def __str__(self) -> str:
        return f"{self.lhs} {self.op.value} {self.rhs}"


@dataclass(frozen=True, slots=True)
class Logic:
    """``lhs and rhs``, ``lhs or rhs`` of two conditions."""

    op: LogicOp
    lhs: Condition
    rhs: Condition

    def __str__(self) -> str:
        prec = _LOGIC_PREC[self.op]
        return f"{_cparen(self.lhs, prec)} {self.op.value} {_cparen(self.rhs, prec + 1)}"


@dataclass(frozen=True, slots=True)
class Not:
    operand: Condition

    def __str__(self) -> str:
        return f"not {_cparen(self.operand, 3)}"


Condition = Compare | Logic | Not


@dataclass(frozen=True, slots=True)
class Select:
    """``select(cond, then, otherwise)``: ``then`` where the condition holds, else
    ``otherwise``, in the promotion of their types. Both are reads of the statement for the
    model (every instance's reads of both are proved in bounds); only the chosen one is
    computed (C's ``?:``), so an i32 division in the other never faults."""

    cond: Condition
    then: ValueExpr
    otherwise: ValueExpr

    def __str__(self) -> str:
        return f"select({self.cond}, {self.then}, {self.otherwise})"


ValueExpr = Const | Read | IndexValue | Neg | Binary | Call | Select


@dataclass(frozen=True, slots=True)
class Assume:
    """``assume cond``: the sizes the program is valid for. The condition compares index
    expressions over the sizes (``IndexValue`` operands); it is the context of every proof
    and of the mapping, and every run checks it."""

    cond: Condition
    loc: SourceLoc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"assume {self.cond}"


# the parser's levels, loosest first (Python's: | ^ & shifts + - * / %), then unary and atoms
_VALUE_PREC = {
    ValueOp.BITOR: 1,
    ValueOp.BITXOR: 2,
    ValueOp.BITAND: 3,
    ValueOp.SHL: 4,
    ValueOp.SHR: 4,
    ValueOp.ADD: 5,
    ValueOp.SUB: 5,
    ValueOp.MUL: 6,
    ValueOp.DIV: 6,
    ValueOp.MOD: 6,
}
_UNARY_PREC = 7
_LOGIC_PREC = {LogicOp.OR: 1, LogicOp.AND: 2}


def _cparen(cond: Condition, prec: int) -> str:
    own = _LOGIC_PREC[cond.op] if isinstance(cond, Logic) else 3
    return f"({cond})" if own < prec else str(cond)


def value_children(expr: ValueExpr | Condition) -> tuple:
    """The value and condition operands of a value expression or condition, in order (a
    read's indices and an index value's expression are not values: none)."""
    if isinstance(expr, (Neg, Not)):
        return (expr.operand,)
    if isinstance(expr, (Binary, Compare, Logic)):
        return (expr.lhs, expr.rhs)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Select):
        return (expr.cond, expr.then, expr.otherwise)
    return ()


def map_values(expr, leaf):
    """``expr`` (a value expression or condition) rebuilt with every leaf (read, constant,
    index value) replaced by ``leaf(it)``."""
    if isinstance(expr, Neg):
        return Neg(map_values(expr.operand, leaf))
    if isinstance(expr, Not):
        return Not(map_values(expr.operand, leaf))
    if isinstance(expr, (Binary, Compare, Logic)):  # replace: a Binary keeps its line:col
        return replace(expr, lhs=map_values(expr.lhs, leaf), rhs=map_values(expr.rhs, leaf))
    if isinstance(expr, Call):
        return Call(expr.fn, tuple(map_values(a, leaf) for a in expr.args))
    if isinstance(expr, Select):
        return Select(
            map_values(expr.cond, leaf), map_values(expr.then, leaf), map_values(expr.otherwise, leaf)
        )
    return leaf(expr)


def _vparen(expr: ValueExpr, prec: int) -> str:
    if isinstance(expr, Binary):
        own = _VALUE_PREC[expr.op]
    elif isinstance(expr, IndexValue) and isinstance(expr.expr, (IBin, INeg)):
        own = 0  # an index expression inside a value always gets parentheses
    elif isinstance(expr, Const) and expr.value < 0:
        own = _VALUE_PREC[ValueOp.MUL]
    else:
        own = _UNARY_PREC
    return f"({expr})" if own < prec else str(expr)


def settle(cond: Condition) -> bool | Condition:
    """A condition over index values with what its constants decide folded away: True or
    False where it no longer depends on a size, else the condition that is left (an
    ``assume`` as sizes get bound)."""
    if isinstance(cond, Not):
        inner = settle(cond.operand)
        return (not inner) if isinstance(inner, bool) else Not(inner)
    if isinstance(cond, Logic):
        lhs, rhs = settle(cond.lhs), settle(cond.rhs)
        deciding = cond.op is LogicOp.OR  # what decides an `or` alone; an `and`, its negation
        for side, other in ((lhs, rhs), (rhs, lhs)):
            if isinstance(side, bool):
                return deciding if side is deciding else other
        return Logic(cond.op, lhs, rhs)
    a, b = cond.lhs.expr, cond.rhs.expr
    if not (isinstance(a, IConst) and isinstance(b, IConst)):
        return cond
    return cond.op.holds(a.value, b.value)


def leaves_of(expr: ValueExpr) -> tuple[ValueExpr, ...]:
    """The leaves of a value expression (reads, constants, indices used as values), left
    to right, those of its conditions included."""
    children = value_children(expr)
    if not children:
        return (expr,)
    return tuple(leaf for child in children for leaf in leaves_of(child))


def valued_indices(e: ValueExpr | Condition | None) -> set[str]:
    """The names an ``IndexValue`` of a value expression or condition mentions (loop
    indices, sizes); none of None. A guard's leaves are all index values (``validate``)."""
    if e is None:
        return set()
    return {name for leaf in leaves_of(e) if isinstance(leaf, IndexValue) for name in index_vars(leaf.expr)}


def value_reads(expr: ValueExpr) -> tuple[Read, ...]:
    """The reads whose values an expression computes with, left to right: ``reads_of``
    without the sources of gathered indices (an index is no value: its type does not enter
    the statement's)."""
    return tuple(leaf for leaf in leaves_of(expr) if isinstance(leaf, Read))


def result_reads(expr: ValueExpr) -> tuple[Read, ...]:
    """The reads whose values flow into ``expr``'s result, left to right: ``value_reads``
    without those of a select's condition, which decide between two values but are not one
    (``select(x[i] > m, j, best[i])`` computes j or best[i], whatever type x has)."""
    if isinstance(expr, Select):
        return result_reads(expr.then) + result_reads(expr.otherwise)
    if isinstance(expr, Read):
        return (expr,)
    return tuple(read for child in value_children(expr) for read in result_reads(child))


def operand_reads(stmt) -> tuple[Read, ...]:
    """The reads of a statement (Assign or Anchor) but its target's, in evaluation order:
    its predicate's (``Assign.predicate``), then its value's."""
    own = () if stmt.predicate is None else reads_of(stmt.predicate)
    return own + reads_of(stmt.value)


def reads_of(expr: ValueExpr) -> tuple[Read, ...]:
    """Every buffer read in a value expression, left to right; the source of a gathered
    index (``I[i]`` of ``A[I[i]]``) comes just before the read that it indexes."""
    return tuple(
        read
        for leaf in leaves_of(expr)
        if isinstance(leaf, Read)
        for read in (*(g.source for _, g in gathers_of(leaf)), leaf)
    )


# ------------------------------------------------------------------- declarations


@dataclass(frozen=True, slots=True)
class Param:
    """A size parameter, with an optional default value."""

    name: str
    default: int | None = None
    loc: SourceLoc | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class BufferDecl:
    """``kind name: dtype[shape]``. A ``new`` buffer declared inside a block is local to
    one execution of that block: each iteration of the enclosing loops has its own copy."""

    name: str
    kind: BufferKind
    dtype: DType
    shape: tuple[IndexExpr, ...]
    loc: SourceLoc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.kind.value} {self.name}: {self.dtype.value}[{', '.join(map(str, self.shape))}]"

    @property
    def by_value(self) -> bool:
        """An ``in`` scalar: the launcher and the kernels take it by value, so reading it is
        reading a parameter: no memory access, no traffic (``codegen.cuda``, the cost model)."""
        return self.kind is BufferKind.IN and not self.shape


# --------------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class Assign:
    """``buffer[indices] op value``. ``name`` (S0, S1, ...) is the statement's name in the
    polyhedral model, given in textual order."""

    name: str
    buffer: str
    indices: tuple[IndexExpr, ...]
    op: AssignOp
    value: ValueExpr
    loc: SourceLoc | None = field(default=None, compare=False)
    # ``if cond { .. }`` around it: a condition on the loop indices and sizes (comparisons
    # of ``IndexValue``s) that restricts the statement's domain; None: every instance runs
    guard: Condition | None = None
    # ``if cond { .. }`` around it whose condition reads data: every instance of the domain
    # evaluates it (its reads are the statement's), and only those where it holds store (a
    # may-write); None: every instance stores
    predicate: Condition | None = None
    # ``atomic O[i] += x``: the update is one atomic operation, so instances of other
    # threads may update the element too (a scatter, ``is_scatter``, is atomic whatever this says)
    atomic: bool = False

    @property
    def target(self) -> Read:
        return Read(self.buffer, self.indices, self.loc)

    @property
    def is_scatter(self) -> bool:
        """Whether the target's index is read from a buffer (``O[I[i]] += x``): instances
        may update one element, so the update runs as an atomic (``ATOMIC_OPS``)."""
        return any(isinstance(e, Gather) for e in self.indices)

    @property
    def is_atomic(self) -> bool:
        """Whether the update is one atomic operation (``atomic`` written, or a scatter)."""
        return self.atomic or self.is_scatter

    def reads(self) -> tuple[Read, ...]:
        """Reads in evaluation order: the predicate's, the operands, then the sources of
        the target's gathered indices (a scatter's) and the target itself for updates."""
        own = tuple(g.source for _, g in gathers_of(self.target))
        own += (self.target,) if self.op.is_update else ()
        return operand_reads(self) + own

    def __str__(self) -> str:
        return f"{'atomic ' if self.atomic else ''}{self.target} {self.op.value} {self.value}"


@dataclass(frozen=True, slots=True)
class Anchor:
    """``anchor expr`` (seed 003): a point in the program where ``expr`` is evaluated and
    its value discarded. It changes no buffer; its reads are part of the polyhedral model
    (bounds-checked, ordered by dependences), which lets later stages stage or prefetch
    the data it names at exactly this point."""

    name: str
    value: ValueExpr
    loc: SourceLoc | None = field(default=None, compare=False)
    guard: Condition | None = None  # as ``Assign.guard``
    predicate: Condition | None = None  # as ``Assign.predicate``

    def reads(self) -> tuple[Read, ...]:
        return operand_reads(self)

    def __str__(self) -> str:
        return f"anchor {self.value}"


@dataclass(frozen=True, slots=True)
class New:
    """A block-local temporary: in scope from here to the end of the enclosing block."""

    decl: BufferDecl

    def __str__(self) -> str:
        return str(self.decl)


@dataclass(frozen=True, slots=True)
class Loop:
    """``par extent index { body }`` or ``seq extent index { body }``: index in [0, extent)."""

    kind: LoopKind
    index: str
    extent: IndexExpr
    body: tuple[Stmt, ...]
    loc: SourceLoc | None = field(default=None, compare=False)

    @property
    def is_par(self) -> bool:
        return self.kind is LoopKind.PAR


Stmt = Assign | Anchor | New | Loop
Statement = Assign | Anchor  # the statements that have instances in the model


# ------------------------------------------------------------------------ program


@dataclass(frozen=True, slots=True)
class Program:
    """A whole TE program.

    ``buffers`` holds the top-level declarations (``in``, ``out``, ``inout`` and program-wide
    ``new``); block-local ``new`` buffers are :class:`New` statements in the body.
    ``bindings`` records the sizes fixed by :meth:`bind` (they no longer appear as params:
    their values were substituted into every expression).
    """

    name: str
    params: tuple[Param, ...]
    buffers: tuple[BufferDecl, ...]
    body: tuple[Stmt, ...]
    bindings: tuple[tuple[str, int], ...] = ()
    source: str | None = field(default=None, compare=False)  # file name, for messages
    text: str | None = field(default=None, compare=False, repr=False)  # source text
    assumptions: tuple[Assume, ...] = ()  # ``assume`` lines: the sizes it is valid for

    def __repr__(self) -> str:
        """One line, whatever the program's size (``str`` prints the whole program)."""
        sizes = [p.name if p.default is None else f"{p.name}={p.default}" for p in self.params]
        sizes += [f"{n}={v} (bound)" for n, v in self.bindings]
        return (
            f"<Program {self.name}: sizes {_listed(sizes)}; buffers {_listed([b.name for b in self.buffers])}; "
            f"{_count(len(_statements_of(self.body)), 'statement')}>"
        )

    # -- lookup

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def buffer(self, name: str) -> BufferDecl:
        """The declaration of a buffer, top-level or block-local."""
        for decl in self.all_buffers():
            if decl.name == name:
                return decl
        raise KeyError(name)

    def all_buffers(self) -> tuple[BufferDecl, ...]:
        """Top-level declarations first, then block-local ones in textual order."""
        local: list[BufferDecl] = []

        def visit(stmts: tuple[Stmt, ...]) -> None:
            for stmt in stmts:
                if isinstance(stmt, New):
                    local.append(stmt.decl)
                elif isinstance(stmt, Loop):
                    visit(stmt.body)

        visit(self.body)
        return self.buffers + tuple(local)

    @property
    def inputs(self) -> tuple[BufferDecl, ...]:
        """Buffers the caller provides: ``in`` and ``inout``."""
        return tuple(b for b in self.buffers if b.kind in (BufferKind.IN, BufferKind.INOUT))

    @property
    def outputs(self) -> tuple[BufferDecl, ...]:
        """Buffers returned to the caller: ``out`` and ``inout``."""
        return tuple(b for b in self.buffers if b.kind in (BufferKind.OUT, BufferKind.INOUT))

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.bindings)

    def sizes_in_words(self, context: str | None) -> str:
        """The sizes a proof of this program holds for: ``context`` (the caller's isl
        constraints, else every size >= 1) under the program's own ``assume`` lines."""
        words = context or "every size >= 1"
        if self.assumptions:
            words += " with " + " and ".join(
                f"({a.cond})" if isinstance(a.cond, Logic) and len(self.assumptions) > 1 else str(a.cond)
                for a in self.assumptions
            )
        return words

    def error_context(self) -> dict:
        """Keyword arguments that place an error in this program's text."""
        return {"source": self.source or self.name, "text": self.text}

    # -- transformation

    def bind(self, **sizes: int) -> Program:
        """Fix size parameters to numbers (partial binding allowed).

        Each bound name is substituted into every extent, shape and index, and constants
        are folded, so ``C[i * N + j]`` becomes affine once N is a number."""
        from polymap.errors import ArgumentError

        known = set(self.param_names)
        for name, value in sizes.items():
            if name not in known:
                bound = dict(self.bindings)
                why = f" (already bound to {bound[name]})" if name in bound else ""
                raise ArgumentError(
                    f"cannot bind size '{name}': program '{self.name}' has no unbound size of that name"
                    f"{why}; its sizes are {', '.join(known) or 'none'}"
                )
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ArgumentError(f"size {name} must be a non-negative integer, got {value!r}")
            if value > INDEX_MAX:
                raise ArgumentError(f"size {name} = {value} does not fit in 64 bits (at most {INDEX_MAX})")
        if not sizes:
            return self
        values = {name: IConst(int(v)) for name, v in sizes.items()}
        bound = Program(
            name=self.name,
            params=tuple(p for p in self.params if p.name not in sizes),
            buffers=tuple(_subst_decl(b, values) for b in self.buffers),
            body=tuple(_subst_stmt(s, values) for s in self.body),
            bindings=self.bindings + tuple((n, int(v)) for n, v in sizes.items()),
            source=self.source,
            text=self.text,
            assumptions=self._bound_assumptions(values, sizes),
        )
        from polymap.ir.validate import check_limits

        # Folding the bound values can make a constant that no 64-bit index can hold (N * N).
        check_limits(bound)
        return bound

    def _bound_assumptions(self, values: dict[str, IndexExpr], sizes: dict) -> tuple[Assume, ...]:
        """The assumptions with ``values`` substituted: one that no longer mentions a size is
        checked (ArgumentError naming it if the sizes violate it) and dropped."""
        kept = []
        for a in self.assumptions:
            cond = settle(substitute_value(a.cond, values))
            if not isinstance(cond, bool):
                kept.append(Assume(cond, a.loc))
            elif not cond:
                from polymap.errors import ArgumentError

                bound = ", ".join(f"{n} = {v}" for n, v in (*self.bindings, *sizes.items()))
                raise ArgumentError(
                    f"the sizes {bound} violate '{a}': program '{self.name}' is valid only where it holds",
                    loc=a.loc,
                    **self.error_context(),
                )
        return tuple(kept)

    def bind_defaults(self) -> Program:
        """Bind every size parameter that has a default value."""
        return self.bind(**{p.name: p.default for p in self.params if p.default is not None})

    def __str__(self) -> str:
        from polymap.ir.printer import format_program

        return format_program(self)


def _subst_decl(decl: BufferDecl, values: dict[str, IndexExpr]) -> BufferDecl:
    shape = tuple(substitute_index(e, values) for e in decl.shape)
    return BufferDecl(decl.name, decl.kind, decl.dtype, shape, decl.loc)


def substitute_value(expr: ValueExpr | Condition, values: dict[str, IndexExpr]) -> ValueExpr | Condition:
    """``expr`` (a value or a condition) with index variables replaced by expressions in its
    reads' indices and its index values (constants folded)."""

    def leaf(e):
        if isinstance(e, Read):
            return Read(e.buffer, tuple(substitute_index(i, values) for i in e.indices), e.loc)
        if isinstance(e, IndexValue):
            return IndexValue(substitute_index(e.expr, values))
        return e

    return map_values(expr, leaf)


def _subst_stmt(stmt: Stmt, values: dict[str, IndexExpr]) -> Stmt:
    if isinstance(stmt, (Assign, Anchor)):
        guard = None if stmt.guard is None else substitute_value(stmt.guard, values)
        predicate = None if stmt.predicate is None else substitute_value(stmt.predicate, values)
        value = substitute_value(stmt.value, values)
        if isinstance(stmt, Anchor):
            return Anchor(stmt.name, value, stmt.loc, guard, predicate)
        indices = tuple(substitute_index(i, values) for i in stmt.indices)
        return Assign(
            stmt.name, stmt.buffer, indices, stmt.op, value, stmt.loc, guard, predicate, stmt.atomic
        )
    if isinstance(stmt, New):
        return New(_subst_decl(stmt.decl, values))
    body = tuple(_subst_stmt(s, values) for s in stmt.body)
    return Loop(stmt.kind, stmt.index, substitute_index(stmt.extent, values), body, stmt.loc)


def statement_text(stmt: Assign | Anchor) -> str:
    """```target = value` at line:col`` (the place only where the statement has one): a
    statement named by its text and place, for a line about a program that a rewrite
    renumbers."""
    at = f" at {stmt.loc.line}:{stmt.loc.col}" if stmt.loc is not None else ""
    return f"`{stmt}`{at}"


def guarded(stmt: Stmt, cond: Condition) -> Stmt:
    """``stmt`` (and every statement in it) under ``cond`` as well as its own guard."""
    if isinstance(stmt, Loop):
        return replace(stmt, body=tuple(guarded(s, cond) for s in stmt.body))
    if isinstance(stmt, (Assign, Anchor)):
        return replace(stmt, guard=cond if stmt.guard is None else Logic(LogicOp.AND, cond, stmt.guard))
    return stmt  # a New: only in a loop inside the if, where its block scopes it


def substitute_stmt(stmt: Stmt, values: dict[str, IndexExpr]) -> Stmt:
    """``stmt`` with index variables replaced by expressions (in indices, extents and shapes)."""
    return _subst_stmt(stmt, values)


def _listed(names: list[str], most: int = 8) -> str:
    """At most ``most`` names, then how many more: a repr stays one short line."""
    if not names:
        return "none"
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _statements_of(body: tuple[Stmt, ...]) -> list[Stmt]:
    found: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, Loop):
            found.extend(_statements_of(stmt.body))
        elif isinstance(stmt, (Assign, Anchor)):
            found.append(stmt)
    return found
