"""Printing IR index and value expressions and statements as C, with the reference
executor's typing (``polymap/reference.py``), so that the emitted code computes what the
ground truth computes:

* a statement computes in its *compute type*: the widest element type among the buffers it
  reads (i32 < f32 < f64), else the type of the buffer it writes (f32 for an ``anchor``);
* a literal takes the compute type, except that a fractional literal among i32 values is
  f32 (as in C, ``2 * 2.5`` is 5.0); an index used as a value is converted to it;
* a binary operation converts both sides to the wider type; i32 ``/`` truncates toward zero;
  ``exp log sqrt tanh`` of an i32 value work in f32;
* ``t op= v`` computes ``t op v`` in the wider of the two types and converts the result to
  ``t``'s type (a float stored into i32 truncates toward zero and saturates, NaN
  giving 0: ``pm_to_i32``).

Indices are quasi-affine: ``//`` and ``%`` use the floor helpers of
``cuda_templates/polymap_helpers.cuh`` (C's own ``/`` and ``%`` truncate). The address of
every access is given to the printer (``address``), built by isl from the proved access
relation (``schedule/kernel.py``); a global access is flattened row-major
(``linear_offset``): ``A[i, k]`` of shape ``[M, K]`` is ``A[i * K + k]``. Integer
arithmetic is printed in ``int`` where every intermediate value provably fits, else in
``long long`` (``schedule/ranges.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from polymap.errors import InternalError
from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    Call,
    Compare,
    Const,
    DType,
    Fn,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    INeg,
    IVar,
    LogicOp,
    Neg,
    Not,
    Read,
    Select,
    ValueExpr,
    ValueOp,
)
from polymap.ir.value_types import (
    bitwise_type,
    comparison_type,
    float_type,
    literal_type,
    predicate_type,
    promote,
    statement_type,
)
from polymap.schedule.ranges import index_intervals, require64

# the C type a buffer of each dtype is stored as (f16 and bf16 as their bits)
C_TYPE = {
    DType.F16: "unsigned short",
    DType.BF16: "unsigned short",
    DType.F32: "float",
    DType.F64: "double",
    DType.I8: "signed char",
    DType.U8: "unsigned char",
    DType.I32: "int",
    DType.I64: "long long",
    DType.BOOL: "unsigned char",
}
# a read of a storage type in its compute type (cuda_templates/polymap_helpers.cuh)
_WIDEN = {
    DType.F16: "pm_f16_to_f32",
    DType.BF16: "pm_bf16_to_f32",
    DType.I8: "(int)",
    DType.U8: "(int)",
    DType.BOOL: "(int)",
}
# a float stored into an integer type: saturating, NaN -> 0
_FROM_FLOAT = {DType.I8: "pm_to_i8", DType.U8: "pm_to_u8", DType.I32: "pm_to_i32", DType.I64: "pm_to_i64"}
# functions of a float: C's name for a double (the float one adds ``f``), or polymap's
# helper (overloaded for both)
_FLOAT_FN = {
    Fn.EXP: "exp",
    Fn.LOG: "log",
    Fn.SQRT: "sqrt",
    Fn.TANH: "tanh",
    Fn.SIN: "sin",
    Fn.COS: "cos",
    Fn.ERF: "erf",
}
_HELPER_FN = {Fn.RSQRT: "pm_rsqrt", Fn.SIGMOID: "pm_sigmoid"}
_UPDATE = {AssignOp.ADD: "+", AssignOp.SUB: "-", AssignOp.MUL: "*", AssignOp.DIV: "/"}

# C precedence levels (higher binds tighter): what needs parentheses inside what.
_ATOM, _UNARY, _MUL, _ADD, _CMP, _AND, _OR, _COND = 16, 15, 13, 12, 10, 5, 4, 3
_BIT_LEVEL = {ValueOp.BITAND: 8, ValueOp.BITXOR: 7, ValueOp.BITOR: 6}  # all below == in C
_SHIFT = {ValueOp.SHL: "pm_shl", ValueOp.SHR: "pm_shr"}


def paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text


class StatementPrinter:
    """Prints statements of one program. ``name`` gives the C identifier of a user name
    (size, loop index or buffer); ``decls`` the declaration of every buffer by name;
    ``scalars`` the 0-d buffers that are plain C variables (a thread's registers)."""

    def __init__(self, name: Callable[[str], str], decls: dict[str, BufferDecl], scalars=frozenset()) -> None:
        self.name = name
        self.decls = decls
        self.scalars = scalars  # 0-d buffers held in a C variable rather than behind a pointer
        # the C lvalue of every access of the statement being printed, by (buffer, indices)
        # as written: built from isl's expressions of the proved relations by the caller
        self.address: dict[tuple[str, tuple[IndexExpr, ...]], str] = {}
        # the range of every name an index used as a value may mention (its width)
        self.index_ranges: dict = {}
        # a scatter's checked indices (``pm_scatter_index``): the declarations that compute
        # them, and the names its target's address uses (-1 where the index is outside)
        self.scatter_indices: tuple[tuple[str, str], ...] = ()
        # the statement's (or its predicate's) own type: set by ``statement`` for each
        self.root = DType.F32

    # -- indices

    def index(self, e: IndexExpr, wide: bool = False) -> tuple[str, int]:
        """C text of an index expression and its precedence; ``wide``: in ``long long``."""
        if isinstance(e, IConst):
            text = f"{e.value}LL" if wide else str(e.value)
            return (text, _ATOM) if e.value >= 0 else (text, _UNARY)
        if isinstance(e, IVar):
            return (f"(long long){self.name(e.name)}", _UNARY) if wide else (self.name(e.name), _ATOM)
        if isinstance(e, INeg):
            text, prec = self.index(e.operand, wide)
            return negate(text, prec), _UNARY
        if isinstance(e, IBin):
            if e.op in (IndexOp.FLOORDIV, IndexOp.MOD, IndexOp.MIN, IndexOp.MAX):
                fn = {
                    IndexOp.FLOORDIV: "pm_floord",
                    IndexOp.MOD: "pm_mod",
                    IndexOp.MIN: "pm_min",
                    IndexOp.MAX: "pm_max",
                }[e.op]
                return f"{fn}({self.index(e.lhs, wide)[0]}, {self.index(e.rhs, wide)[0]})", _ATOM
            level = _MUL if e.op is IndexOp.MUL else _ADD
            lhs, lp = self.index(e.lhs, wide)
            rhs, rp = self.index(e.rhs, wide)
            # left-associative: the right operand of - needs parentheses at its own level
            return f"{paren(lhs, lp, level)} {e.op.value} {paren(rhs, rp, level + 1)}", level
        raise InternalError(f"unknown index expression {e!r}")

    def index_text(self, e: IndexExpr, wide: bool = False) -> str:
        """An index expression as an operand of ``*`` (parenthesized where it needs it)."""
        text, prec = self.index(e, wide)
        return paren(text, prec, _MUL + 1)

    def access(self, buffer: str, indices: tuple[IndexExpr, ...]) -> str:
        if (buffer, indices) in self.address:
            return self.address[(buffer, indices)]
        if buffer in self.scalars:
            return self.name(buffer)
        raise InternalError(f"no address was built for {buffer}{list(indices)}")

    # -- values

    def compute_type(self, stmt: Assign | Anchor) -> DType:
        return statement_type(stmt, lambda name: self.decls[name].dtype)

    def value(self, e: ValueExpr, compute: DType) -> tuple[str, DType, int]:
        """C text of a value expression, its type and precedence."""
        if isinstance(e, Const):
            dtype = literal_type(e.value, compute)
            text = literal(e.value, dtype)
            return text, dtype, _UNARY if text.startswith("-") else _ATOM
        if isinstance(e, IndexValue):
            intervals = index_intervals(e.expr, self.index_ranges)
            for interval in intervals:
                require64(interval, f"the index value {e.expr}")
            if all(i.fits32 for i in intervals):
                text, prec = self.index(e.expr)
                return (
                    convert(text, prec, DType.I32, compute),
                    compute,
                    _UNARY if compute is not DType.I32 else prec,
                )
            # computed in 64 bits, then converted like the reference (i32 wraps)
            text, prec = self.index(e.expr, wide=True)
            return f"({C_TYPE[compute]})({text})", compute, _UNARY
        if isinstance(e, Read):
            return widen(self.access(e.buffer, e.indices), _ATOM, self.decls[e.buffer].dtype)
        if isinstance(e, Neg):
            text, dtype, prec = self.value(e.operand, compute)
            return negate(text, prec), dtype, _UNARY
        if isinstance(e, Binary) and e.op.is_bitwise:
            # in its own type, which its literals and index values take (as the reference)
            (lhs, lp), (rhs, rp), common = self.promoted(
                e.lhs, e.rhs, bitwise_type(e, lambda name: self.decls[name].dtype)
            )
            if e.op in _SHIFT:  # the count tested, where C leaves a shift undefined
                return f"{_SHIFT[e.op]}({lhs}, {rhs})", common, _ATOM
            level = _BIT_LEVEL[e.op]
            return f"{paren(lhs, lp, level)} {e.op.value} {paren(rhs, rp, level + 1)}", common, level
        if isinstance(e, Binary):
            (lhs, lp), (rhs, rp), common = self.promoted(e.lhs, e.rhs, compute)
            if e.op is ValueOp.DIV and common.is_integer:  # never traps; records a division by zero
                return f"pm_idiv({lhs}, {rhs}, __LINE__)", common, _ATOM
            if e.op is ValueOp.MOD:  # floored, as NumPy's mod
                if common.is_integer:
                    return f"pm_imod({lhs}, {rhs}, __LINE__)", common, _ATOM
                return f"pm_fmod({lhs}, {rhs})", common, _ATOM
            level = _ADD if e.op in (ValueOp.ADD, ValueOp.SUB) else _MUL
            return f"{paren(lhs, lp, level)} {e.op.value} {paren(rhs, rp, level + 1)}", common, level
        if isinstance(e, Call):
            return self.call(e, compute)
        if isinstance(e, Select):
            cond, cp = self.condition(e.cond, compute)
            (then, tp), (other, op), common = self.promoted(e.then, e.otherwise, compute)
            # C evaluates only the chosen operand, as the reference counts it (``_Eval``)
            return (
                f"{paren(cond, cp, _OR)} ? {paren(then, tp, _OR)} : {paren(other, op, _COND)}",
                common,
                _COND,
            )
        raise InternalError(f"unknown value expression {e!r}")

    def promoted(self, a: ValueExpr, b: ValueExpr, compute: DType):
        """Two operands converted to their promotion: ((text, precedence) of each, the type)."""
        (at, atype, ap), (bt, btype, bp) = self.value(a, compute), self.value(b, compute)
        common = promote(atype, btype)
        first = (convert(at, ap, atype, common), ap if atype is common else _UNARY)
        second = (convert(bt, bp, btype, common), bp if btype is common else _UNARY)
        return first, second, common

    def condition(self, c, compute: DType) -> tuple[str, int]:
        """C text of a condition and its precedence: a comparison in the promotion of its
        operands; ``and``, ``or`` short-circuit (``&&``, ``||``), as the reference does."""
        if isinstance(c, Compare):  # its literals in the type of what it reads, else ``root``
            own = comparison_type(c, self.root, lambda name: self.decls[name].dtype)
            (lhs, lp), (rhs, rp), _ = self.promoted(c.lhs, c.rhs, own)
            return f"{paren(lhs, lp, _CMP + 1)} {c.op.value} {paren(rhs, rp, _CMP + 1)}", _CMP
        if isinstance(c, Not):
            text, prec = self.condition(c.operand, compute)
            return f"!{paren(text, prec, _UNARY)}", _UNARY
        level = _AND if c.op is LogicOp.AND else _OR
        lhs, lp = self.condition(c.lhs, compute)
        rhs, rp = self.condition(c.rhs, compute)
        # an && inside an || in parentheses though C needs none (-Wparentheses)
        left, right = level, level + 1
        if level == _OR:
            left, right = (_AND + 1 if lp == _AND else left), (_AND + 1 if rp == _AND else right)
        return f"{paren(lhs, lp, left)} {'&&' if level == _AND else '||'} {paren(rhs, rp, right)}", level

    def call(self, e: Call, compute: DType) -> tuple[str, DType, int]:
        # a conversion's argument: its literals in the statement's own type (``root``)
        args = [self.value(a, self.root if e.fn.cast is not None else compute) for a in e.args]
        if e.fn.cast is not None:  # stored in the type, read back in its compute type
            text, dtype, prec = args[0]
            if dtype is e.fn.cast:
                return text, dtype, prec
            stored = convert(text, prec, dtype, e.fn.cast)
            return widen(stored, _UNARY if stored.startswith("(") else _ATOM, e.fn.cast)
        if e.fn in _FLOAT_FN or e.fn in _HELPER_FN:
            text, dtype, prec = args[0]
            if dtype.is_integer:
                text, dtype = convert(text, prec, dtype, DType.F32), DType.F32
            if e.fn in _HELPER_FN:
                return f"{_HELPER_FN[e.fn]}({text})", dtype, _ATOM
            suffix = "f" if dtype is DType.F32 else ""
            return f"{_FLOAT_FN[e.fn]}{suffix}({text})", dtype, _ATOM
        if e.fn in (Fn.FLOOR, Fn.CEIL):
            text, dtype, prec = args[0]
            if dtype.is_integer:
                return text, dtype, prec
            suffix = "f" if dtype is DType.F32 else ""
            return f"{e.fn.value}{suffix}({text})", dtype, _ATOM
        if e.fn is Fn.ABS:
            text, dtype, _ = args[0]
            fn = {DType.I32: "pm_abs", DType.I64: "pm_abs", DType.F32: "fabsf", DType.F64: "fabs"}[dtype]
            return f"{fn}({text})", dtype, _ATOM
        (a, at, ap), (b, bt, bp) = args
        common = promote(at, bt)
        if e.fn in (Fn.POW, Fn.NEXTAFTER):
            common = float_type(common)
            fn = e.fn.value + ("f" if common is DType.F32 else "")
            return f"{fn}({convert(a, ap, at, common)}, {convert(b, bp, bt, common)})", common, _ATOM
        fn = "pm_max" if e.fn is Fn.MAX else "pm_min"
        return f"{fn}({convert(a, ap, at, common)}, {convert(b, bp, bt, common)})", common, _ATOM

    # -- statements

    def statement(self, stmt: Assign | Anchor) -> str:
        """One C statement (ends with ``;`` or ``}``): under ``if`` where a data condition
        predicates it (``Assign.predicate``), evaluated by every instance as the reference
        does, its literals and index values in the predicate's own type
        (``predicate_type``)."""
        text = self.unpredicated(stmt)
        if stmt.predicate is None:
            return text
        self.root = predicate_type(stmt, lambda name: self.decls[name].dtype)
        condition, _ = self.condition(stmt.predicate, self.root)
        return f"if ({condition}) {{ {text} }}"

    def unpredicated(self, stmt: Assign | Anchor) -> str:
        compute = self.compute_type(stmt)
        # the type literals take again below a conversion inside a bitwise operation (which
        # gives the rest of its operands its own type), and in a comparison that reads no
        # buffer (``comparison_type``)
        self.root = compute
        value, vtype, vprec = self.value(stmt.value, compute)
        if isinstance(stmt, Anchor):
            return f"(void)({value});"
        target = self.access(stmt.buffer, stmt.indices)
        ttype = self.decls[stmt.buffer].dtype
        if stmt.is_atomic:
            return self.atomic_update(stmt, target, convert(value, vprec, vtype, ttype), ttype)
        if stmt.op is AssignOp.SET:
            return f"{target} = {convert(value, vprec, vtype, ttype)};"
        common = promote(ttype, vtype)
        old_text, old_type, old_prec = widen(target, _ATOM, ttype)
        old = convert(old_text, old_prec, old_type, common)
        new = convert(value, vprec, vtype, common)
        if stmt.op is AssignOp.DIV and common.is_integer:  # as ``/``: records a division by zero
            return f"{target} = {convert(f'pm_idiv({old}, {new}, __LINE__)', _ATOM, common, ttype)};"
        if stmt.op in _UPDATE:
            if common is ttype is vtype:
                return f"{target} {stmt.op.value} {value};"
            result = (
                f"{old} {_UPDATE[stmt.op]} {paren(new, _UNARY if vtype is not common else vprec, _MUL + 1)}"
            )
        else:
            result = f"{'pm_max' if stmt.op is AssignOp.MAX else 'pm_min'}({old}, {new})"
        return f"{target} = {convert(result, _ATOM if stmt.op not in _UPDATE else _ADD, common, ttype)};"

    def atomic_update(self, stmt: Assign, target: str, value: str, ttype: DType) -> str:
        """An update as one atomic operation (``pm_atomic_add`` and its kind, in
        ``cuda_templates/polymap_helpers.cuh``), of the value converted to the target's type.
        A scatter computes that value first (as the reference does), then checks its
        gathered indices, and where one is outside its dimension updates no element."""
        if stmt.is_scatter and not self.scatter_indices:
            raise InternalError(f"{stmt.name}: no checked index was built for the scatter {stmt.target}")
        if not stmt.is_scatter:  # ``atomic O[i] += x``: its index is proved in bounds
            return f"{_ATOMIC[stmt.op]}(&{target}, ({C_TYPE[ttype]})({value}));"
        lines = [f"const {C_TYPE[ttype]} pm_value = {value};"]
        lines += [f"{declaration}" for declaration, _ in self.scatter_indices]
        inside = " && ".join(f"{name} >= 0" for _, name in self.scatter_indices)
        lines.append(f"if ({inside}) {_ATOMIC[stmt.op]}(&{target}, pm_value);")
        return "{ " + " ".join(lines) + " }"


_ATOMIC = {
    AssignOp.ADD: "pm_atomic_add",
    AssignOp.SUB: "pm_atomic_sub",
    AssignOp.MAX: "pm_atomic_max",
    AssignOp.MIN: "pm_atomic_min",
}


def negate(text: str, prec: int) -> str:
    """``-text``; never ``--x``, which C reads as a decrement."""
    inner = paren(text, prec, _UNARY)
    return f"-({inner})" if inner.startswith("-") else f"-{inner}"


def convert(text: str, prec: int, src: DType, dst: DType) -> str:
    """``text`` (a computed value of type src, at precedence prec) converted to dst, a
    compute type or, for a store, a storage type (the rules of ``reference.to_dtype``)."""
    if src is dst:
        return text
    if dst in (DType.F16, DType.BF16):  # rounded to nearest even, from f32
        fn = "pm_f32_to_f16" if dst is DType.F16 else "pm_f32_to_bf16"
        return f"{fn}({convert(text, prec, src, DType.F32)})"
    if dst is DType.BOOL:
        return f"(unsigned char)({paren(text, prec, _CMP + 1)} != 0)"
    if dst in _FROM_FLOAT and src.is_float:  # saturating, NaN -> 0 (polymap_helpers.cuh)
        return f"{_FROM_FLOAT[dst]}({text})"
    return f"({C_TYPE[dst]}){paren(text, prec, _UNARY)}"


def widen(text: str, prec: int, dtype: DType) -> tuple[str, DType, int]:
    """A stored value (C text of type ``dtype`` at precedence ``prec``) in its compute type,
    with its precedence: f16 and bf16 as f32 (a call), i8, u8 and bool as int (a cast)."""
    if not dtype.is_storage:
        return text, dtype, prec
    fn = _WIDEN[dtype]
    if fn.startswith("("):
        return f"{fn}{paren(text, prec, _UNARY)}", dtype.compute, _UNARY
    return f"{fn}({text})", dtype.compute, _ATOM


def literal(value: float, dtype: DType) -> str:
    """An exact C literal of ``value`` converted to ``dtype`` (as NumPy converts it)."""
    if dtype.is_integer:
        number = int(np.asarray(value).astype(dtype.numpy))
        suffix = "LL" if dtype is DType.I64 else ""
        if number == np.iinfo(dtype.numpy).min:
            # C reads -2147483648 as the negation of 2147483648, a long: the sum after it
            # would not wrap in 32 bits (and 9223372036854775808LL fits no signed type)
            return f"({number + 1}{suffix} - 1)"
        return f"{number}{suffix}"
    with np.errstate(over="ignore"):  # a value beyond the type's range is its infinity
        exact = float(np.asarray(value).astype(dtype.numpy))
    if not np.isfinite(exact):
        text = "PM_INF" if exact > 0 else "-PM_INF" if exact < 0 else "PM_NAN"  # polymap_helpers.cuh
        return text if dtype is DType.F32 else f"(double){text}"
    # repr is the shortest decimal that reads back as this double; the double is exactly
    # a float32 value for f32, so the f-suffixed decimal reads back as that float.
    text = repr(exact)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + ("f" if dtype is DType.F32 else "")


def linear_offset(indices: list[str], extents: list[str], *, wide: bool) -> str:
    """The row-major offset ``((i_0 * E_1 + i_1) * E_2 + i_2) ..`` of printed indices and
    extents (each extent an operand of ``*``, see ``StatementPrinter.index_text``); with
    ``wide`` the first index is widened, so that the whole sum is computed in ``long long``."""
    if not indices:
        return "0"
    first = indices[0]
    if wide:
        text = f"(long long){first}" if _is_atom(first) else f"(long long)({first})"
    else:
        text = first if _is_atom(first) or len(indices) == 1 else f"({first})"
    for extent, i in zip(extents, indices[1:]):
        text = f"{text} * {extent} + {f'({i})' if '?' in i else i}"
        text = f"({text})"
    return text[1:-1] if len(indices) > 1 else text


def _is_atom(text: str) -> bool:
    return text.replace("_", "a").isalnum()


_RECORDS_FAULT = re.compile(r"\bpm_(idiv|imod|gather|scatter_index)\(.*__LINE__")


def records_faults(source: str) -> bool:
    """Whether emitted text divides an integer value or gathers an index anywhere (``pm_idiv``,
    ``pm_imod``, ``pm_gather``, ``pm_scatter_index``: each records a fault of the data in the fault word instead of
    trapping or reading out of bounds: ``runtime/faults.py``). One search of
    the whole text: ``.`` stops at a line's end, so a match lies within one line."""
    return _RECORDS_FAULT.search(source) is not None
