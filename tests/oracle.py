"""A deliberately naive interpreter of the IR, used only as a test oracle.

It runs one statement instance at a time with scalar values, shares no code with
``polymap.reference`` (no lanes, masks, broadcasting or fancy indexing), and re-derives the
typing rules from their definition (see the reference module's docstring):

* a read gives its buffer's value in the buffer's compute type (f16, bf16 as f32; i8, u8,
  bool as i32; the others as they are);
* computation dtype of a statement: the widest compute type of the buffers its value reads,
  else the target's (f32 for an anchor that reads nothing); literals and index values take
  it; binary operations compute in the wider operand type (i32 < i64 < f32 < f64);
* ``/`` on integers truncates toward zero; exp/log/sqrt/tanh of integers compute in f32;
  max/min propagate NaN; the result is converted to the target's dtype on store (floats to
  integers truncate and saturate, NaN -> 0; integers to narrower ones wrap; to bool: != 0;
  to f16 and bf16 through f32).

Par iterations run in *reverse* order: any order is valid for a race-free program, and a
reversed one makes a racy test program disagree with the reference instead of agreeing
by accident. Every access is bounds-checked.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from polymap.errors import ArgumentError
from polymap.ir.nodes import (
    Anchor,
    AssignOp,
    Binary,
    BufferKind,
    Call,
    CmpOp,
    Compare,
    Const,
    DType,
    Fn,
    Gather,
    IBin,
    IConst,
    IndexOp,
    IndexValue,
    INeg,
    IVar,
    LogicOp,
    Loop,
    Neg,
    New,
    Not,
    Read,
    Select,
    ValueOp,
    value_reads,
)

WIDTH = {DType.I32: 0, DType.I64: 1, DType.F32: 2, DType.F64: 3}  # the compute types
SCALAR = {
    DType.I32: np.int32,
    DType.I64: np.int64,
    DType.F32: np.float32,
    DType.F64: np.float64,
    DType.F16: np.float16,
    DType.BF16: ml_dtypes.bfloat16,
    DType.I8: np.int8,
    DType.U8: np.uint8,
    DType.BOOL: np.bool_,
}
# what a stored value of each narrow type computes in (written out here, not taken from polymap)
COMPUTE = {
    DType.F16: DType.F32,
    DType.BF16: DType.F32,
    DType.I8: DType.I32,
    DType.U8: DType.I32,
    DType.BOOL: DType.I32,
}
DTYPE_OF = {np.dtype(SCALAR[t]): t for t in WIDTH}
INTEGERS = (DType.I32, DType.I64)


def wider(a: DType, b: DType) -> DType:
    return a if WIDTH[a] >= WIDTH[b] else b


def dtype_of(x) -> DType:
    return DTYPE_OF[np.dtype(type(x))]


def compute(t: DType) -> DType:
    return COMPUTE.get(t, t)


def convert(x, t: DType):
    """A numpy scalar of dtype t (a float to an integer type truncates toward zero, saturates
    at the type's range, NaN -> 0; an integer to a narrower one wraps; to bool: != 0; to f16
    and bf16 through f32; written here without the reference's helper, on purpose)."""
    if t is DType.BOOL:
        return np.bool_(x != 0)
    if t in (DType.F16, DType.BF16):
        return np.array(np.float32(x)).astype(SCALAR[t])[()]
    if t in (DType.I8, DType.U8, DType.I32, DType.I64) and isinstance(x, np.floating):
        info = np.iinfo(SCALAR[t])
        v = float(x)
        if v != v:
            return SCALAR[t](0)
        if math.isinf(v):
            return SCALAR[t](info.max if v > 0 else info.min)
        return SCALAR[t](max(int(info.min), min(int(info.max), math.trunc(v))))
    if t in (DType.I8, DType.U8, DType.I32, DType.I64):  # an integer: keep the low bits
        bits = 8 * np.dtype(SCALAR[t]).itemsize
        v = int(x) % (1 << bits)
        if np.iinfo(SCALAR[t]).min < 0 and v >= 1 << (bits - 1):
            v -= 1 << bits
        return SCALAR[t](v)
    return np.array(x).astype(SCALAR[t])[()]


def widen(x, t: DType):
    """A value read from a buffer of type t, in t's compute type."""
    return convert(np.float32(x) if t in (DType.F16, DType.BF16) else x, compute(t))


def undefined(shape, dtype: DType) -> np.ndarray:
    if dtype in (DType.F16, DType.BF16, DType.F32, DType.F64):
        return np.full(shape, np.nan, SCALAR[dtype])
    if dtype is DType.BOOL:
        return np.ones(shape, np.bool_)
    return np.full(shape, np.iinfo(SCALAR[dtype]).min, SCALAR[dtype])


def run_oracle(program, arrays: dict) -> tuple[dict, dict]:
    """Run a program whose sizes are all bound; returns (outputs, instances)."""
    assert not program.params, f"bind every size first: {program.param_names}"
    memory = {}
    for decl in program.buffers:
        shape = tuple(index(e, {}) for e in decl.shape)
        if decl.kind in (BufferKind.IN, BufferKind.INOUT):
            memory[decl.name] = np.array(arrays[decl.name], dtype=SCALAR[decl.dtype])
            assert memory[decl.name].shape == shape, decl.name
        elif decl.kind is BufferKind.OUT:
            memory[decl.name] = np.zeros(shape, SCALAR[decl.dtype])
        else:
            memory[decl.name] = undefined(shape, decl.dtype)
    oracle = Oracle({b.name: b.dtype for b in program.all_buffers()})
    with np.errstate(all="ignore"):
        oracle.block(program.body, {}, memory)
    return {b.name: memory[b.name] for b in program.outputs}, oracle.instances


def index(expr, env: dict) -> int:
    if isinstance(expr, IConst):
        return expr.value
    if isinstance(expr, IVar):
        return env[expr.name]
    if isinstance(expr, INeg):
        return -index(expr.operand, env)
    assert isinstance(expr, IBin)
    a, b = index(expr.lhs, env), index(expr.rhs, env)
    if expr.op is IndexOp.ADD:
        return a + b
    if expr.op is IndexOp.SUB:
        return a - b
    if expr.op is IndexOp.MUL:
        return a * b
    if expr.op not in (IndexOp.MIN, IndexOp.MAX):
        assert b > 0
    # Python's // and % on ints are floor division and floor modulo.
    if expr.op is IndexOp.MIN:
        return a if a < b else b
    if expr.op is IndexOp.MAX:
        return a if a > b else b
    return a // b if expr.op is IndexOp.FLOORDIV else a % b


class Oracle:
    def __init__(self, dtypes: dict) -> None:
        self.dtypes = dtypes
        self.instances: dict[str, int] = {}

    def block(self, body, env: dict, memory: dict) -> None:
        memory = dict(memory)  # this execution's own scope for block-local buffers
        for stmt in body:
            if isinstance(stmt, New):
                memory[stmt.decl.name] = undefined(
                    tuple(index(e, env) for e in stmt.decl.shape), stmt.decl.dtype
                )
            elif isinstance(stmt, Loop):
                n = index(stmt.extent, env)
                order = range(n - 1, -1, -1) if stmt.is_par else range(n)
                for i in order:
                    self.block(stmt.body, {**env, stmt.index: i}, memory)
            else:
                self.instance(stmt, env, memory)

    def instance(self, stmt, env: dict, memory: dict) -> None:
        if stmt.guard is not None and not self.guard_holds(stmt.guard, env):
            return  # the if around it: this instance does not exist
        self.instances[stmt.name] = self.instances.get(stmt.name, 0) + 1
        # the reads whose values reach the result: a select's condition only chooses
        reads = [compute(self.dtypes[r.buffer]) for r in _result_reads(stmt.value)]
        if reads:
            ctype = reads[0]
            for t in reads[1:]:
                ctype = wider(ctype, t)
        else:
            ctype = DType.F32 if isinstance(stmt, Anchor) else compute(self.dtypes[stmt.buffer])
        if stmt.predicate is not None:
            # a data condition: the instance runs, and stores nothing where it fails; its
            # literals take the type of the buffers it reads (else the statement's)
            judged = [compute(self.dtypes[r.buffer]) for r in value_reads(stmt.predicate)]
            ptype = ctype
            if judged:
                ptype = judged[0]
                for t in judged[1:]:
                    ptype = wider(ptype, t)
            self.root = ptype
            if not self.holds(stmt.predicate, env, memory, ptype, stmt.name):
                return
        # the type literals take again below a conversion inside a bitwise operation (which
        # types the rest of its operands its own way), and in a comparison that reads none
        self.root = ctype
        value = self.value(stmt.value, env, memory, ctype, stmt.name)
        if isinstance(stmt, Anchor):
            return
        array = memory[stmt.buffer]
        where = self.element(array, stmt.indices, env, stmt.buffer, memory)
        target = self.dtypes[stmt.buffer]
        if stmt.is_atomic:  # an atomic update of the value in the target's type
            value = convert(value, compute(target))
        if stmt.op is not AssignOp.SET:
            old = widen(array[where], target)
            t = wider(compute(target), dtype_of(value))
            old, value = convert(old, t), convert(value, t)
            if stmt.op is AssignOp.ADD:
                value = old + value
            elif stmt.op is AssignOp.SUB:
                value = old - value
            elif stmt.op is AssignOp.MUL:
                value = old * value
            elif stmt.op is AssignOp.DIV:
                if t in INTEGERS:
                    if int(value) == 0:
                        raise ArgumentError(f"statement {stmt.name}: {t.value} division by zero")
                    q = abs(int(old)) // abs(int(value))
                    value = convert(q if (int(old) < 0) == (int(value) < 0) else -q, t)
                else:
                    value = old / value
            elif stmt.op is AssignOp.MAX:
                value = nan_max(old, value)
            else:
                value = nan_min(old, value)
        array[where] = convert(value, target)

    def element(self, array, indices, env, name, memory=None) -> tuple[int, ...]:
        where = tuple(
            self.gathered(e, env, memory) if isinstance(e, Gather) else index(e, env) for e in indices
        )
        for i, n in zip(where, array.shape):
            if not 0 <= i < n:
                raise IndexError(f"{name}{list(where)} outside shape {array.shape}")
        return where

    def gathered(self, g, env, memory) -> int:
        """A gathered index: the integer read from its source element."""
        source = memory[g.source.buffer]
        return int(source[self.element(source, g.source.indices, env, g.source.buffer)])

    def value(self, e, env, memory, ctype: DType, name: str):
        if isinstance(e, Const):
            if ctype in INTEGERS and not float(e.value).is_integer():
                return convert(e.value, DType.F32)  # a fractional literal is a float, as in C
            return convert(e.value, ctype)
        if isinstance(e, IndexValue):
            return convert(index(e.expr, env), ctype)
        if isinstance(e, Read):
            array = memory[e.buffer]
            return widen(array[self.element(array, e.indices, env, e.buffer, memory)], self.dtypes[e.buffer])
        if isinstance(e, Neg):
            x = self.value(e.operand, env, memory, ctype, name)
            return convert(-x, dtype_of(x))
        if isinstance(e, Binary) and e.op in BITWISE:
            t = self.type_of(e, memory, ctype)  # the type its literals take, not the statement's
            a, b = (int(self.value(x, env, memory, t, name)) for x in (e.lhs, e.rhs))
            return convert(bitwise(e.op, a, b, 64 if t is DType.I64 else 32), t)
        if isinstance(e, Binary):
            a = self.value(e.lhs, env, memory, ctype, name)
            b = self.value(e.rhs, env, memory, ctype, name)
            t = wider(dtype_of(a), dtype_of(b))
            a, b = convert(a, t), convert(b, t)
            if e.op is ValueOp.ADD:
                return a + b
            if e.op is ValueOp.SUB:
                return a - b
            if e.op is ValueOp.MUL:
                return a * b
            if e.op is ValueOp.MOD:
                if t not in INTEGERS:  # floored: a zero result takes the divisor's sign
                    with np.errstate(all="ignore"):
                        r = float(np.fmod(np.float64(a), np.float64(b)))
                    if r == 0:
                        r = math.copysign(0.0, float(b))
                    elif (r < 0) != (float(b) < 0):
                        r += float(b)
                    return convert(np.float64(r), t)
                if int(b) == 0:
                    raise ArgumentError(f"statement {name}: {t.value} modulo by zero")
                return convert(int(a) - (int(a) // int(b)) * int(b), t)  # Python's // floors
            if t not in INTEGERS:
                return a / b
            if int(b) == 0:
                raise ArgumentError(f"statement {name}: {t.value} division by zero")
            q = abs(int(a)) // abs(int(b))
            q = q if (int(a) < 0) == (int(b) < 0) else -q
            return convert(q, t)  # wraps like C on x86
        if isinstance(e, Select):  # only the chosen operand is evaluated, as in C
            chosen = e.then if self.holds(e.cond, env, memory, ctype, name) else e.otherwise
            other = e.otherwise if chosen is e.then else e.then
            x = self.value(chosen, env, memory, ctype, name)
            # the result has the promoted type of both operands, whichever is chosen
            return convert(x, wider(dtype_of(x), self.type_of(other, memory, ctype)))
        assert isinstance(e, Call)
        inner = self.root if e.fn.cast is not None else ctype  # a conversion's argument: as outside
        args = [self.value(a, env, memory, inner, name) for a in e.args]
        if e.fn is Fn.ABS:
            return abs(args[0])
        if e.fn.cast is not None:
            return widen(convert(args[0], e.fn.cast), e.fn.cast)
        if e.fn in (Fn.FLOOR, Fn.CEIL):
            x = args[0]
            if dtype_of(x) in INTEGERS:
                return x
            return (
                convert(np.float64(math.floor(x) if e.fn is Fn.FLOOR else math.ceil(x)), dtype_of(x))
                if math.isfinite(x)
                else x
            )
        if e.fn is Fn.NEXTAFTER:  # math.nextafter steps a double: a float32 steps its own way
            t = wider(wider(dtype_of(args[0]), dtype_of(args[1])), DType.F32)
            x, y = convert(args[0], t), convert(args[1], t)
            if t is DType.F64:
                return np.float64(math.nextafter(float(x), float(y)))
            if math.isnan(x) or math.isnan(y):
                return np.float32(math.nan)
            if x == y:
                return y
            if x == 0:
                tiny = np.frombuffer(np.uint32(1).tobytes(), np.float32)[0]
                return tiny if y > 0 else -tiny
            bits = int(np.frombuffer(np.float32(x).tobytes(), np.uint32)[0])
            away = (y > x) == (x > 0)  # away from zero: the bit pattern grows
            return np.frombuffer(np.uint32(bits + (1 if away else -1)).tobytes(), np.float32)[0]
        if e.fn is Fn.POW:
            t = wider(wider(dtype_of(args[0]), dtype_of(args[1])), DType.F32)
            x, y = convert(args[0], t), convert(args[1], t)
            if (x == 0 or x == -math.inf) and y > 0 and not (float(y).is_integer() and int(y) % 2 == 1):
                return convert(np.float64(0.0 if x == 0 else math.inf), t)  # C99 F.9.4.4
            with np.errstate(all="ignore"):  # in double, rounded once to the type
                return convert(np.float64(x) ** np.float64(y), t)
        if e.fn in (Fn.MAX, Fn.MIN):
            t = wider(dtype_of(args[0]), dtype_of(args[1]))
            a, b = convert(args[0], t), convert(args[1], t)
            return nan_max(a, b) if e.fn is Fn.MAX else nan_min(a, b)
        x = args[0]
        if dtype_of(x) in INTEGERS:
            x = convert(x, DType.F32)
        fn = {
            Fn.EXP: np.exp,
            Fn.LOG: np.log,
            Fn.SQRT: np.sqrt,
            Fn.TANH: np.tanh,
            Fn.SIN: np.sin,
            Fn.COS: np.cos,
            Fn.ERF: lambda v: convert(np.float64(math.erf(float(v))), dtype_of(v)),
            Fn.RSQRT: lambda v: type(v)(1) / np.sqrt(v),
            Fn.SIGMOID: lambda v: type(v)(1) / (type(v)(1) + np.exp(-v)),
        }[e.fn]
        return fn(x)

    def guard_holds(self, c, env) -> bool:
        """An if's condition: comparisons of index expressions, exact integers."""
        if isinstance(c, Not):
            return not self.guard_holds(c.operand, env)
        if isinstance(c, Compare):
            return _compared(c.op, index(c.lhs.expr, env), index(c.rhs.expr, env))
        first = self.guard_holds(c.lhs, env)
        if c.op is LogicOp.AND:
            return first and self.guard_holds(c.rhs, env)
        return first or self.guard_holds(c.rhs, env)

    def holds(self, c, env, memory, ctype: DType, name: str) -> bool:
        if isinstance(c, Not):
            return not self.holds(c.operand, env, memory, ctype, name)
        if isinstance(c, Compare):  # literals: the type of the buffers it reads, else root
            own = [compute(self.dtypes[r.buffer]) for r in _result_reads(c.lhs) + _result_reads(c.rhs)]
            t = own[0] if own else self.root
            for u in own[1:]:
                t = wider(t, u)
            a = self.value(c.lhs, env, memory, t, name)
            b = self.value(c.rhs, env, memory, t, name)
            t = wider(dtype_of(a), dtype_of(b))
            return _compared(c.op, convert(a, t), convert(b, t))
        first = self.holds(c.lhs, env, memory, ctype, name)
        if c.op is LogicOp.AND:
            return first and self.holds(c.rhs, env, memory, ctype, name)
        return first or self.holds(c.rhs, env, memory, ctype, name)

    def type_of(self, e, memory, ctype: DType) -> DType:
        """The type of a value expression without evaluating it (C's static type)."""
        if isinstance(e, Read):
            return compute(self.dtypes[e.buffer])
        if isinstance(e, Const):
            return DType.F32 if ctype in INTEGERS and not float(e.value).is_integer() else ctype
        if isinstance(e, IndexValue):
            return ctype
        if isinstance(e, Neg):
            return self.type_of(e.operand, memory, ctype)
        if isinstance(e, Binary) and e.op in BITWISE:  # its literals: i32 at the narrowest
            return wider(self.type_of(e.lhs, memory, DType.I32), self.type_of(e.rhs, memory, DType.I32))
        if isinstance(e, Binary):
            return wider(self.type_of(e.lhs, memory, ctype), self.type_of(e.rhs, memory, ctype))
        if isinstance(e, Select):
            return wider(self.type_of(e.then, memory, ctype), self.type_of(e.otherwise, memory, ctype))
        args = [self.type_of(a, memory, ctype) for a in e.args]
        if e.fn.cast is not None:
            return compute(e.fn.cast)
        if e.fn in (Fn.ABS, Fn.MAX, Fn.MIN, Fn.FLOOR, Fn.CEIL):
            return wider(*args) if len(args) > 1 else args[0]
        widest = wider(*args) if len(args) > 1 else args[0]
        return DType.F32 if widest in INTEGERS else widest


def _result_reads(e) -> list:
    """The reads of a value expression outside its selects' conditions (written here)."""
    if isinstance(e, Read):
        return [e]
    if isinstance(e, Select):
        return _result_reads(e.then) + _result_reads(e.otherwise)
    if isinstance(e, Neg):
        return _result_reads(e.operand)
    if isinstance(e, Binary):
        return _result_reads(e.lhs) + _result_reads(e.rhs)
    if isinstance(e, Call):
        return [r for a in e.args for r in _result_reads(a)]
    return []


BITWISE = (ValueOp.BITAND, ValueOp.BITOR, ValueOp.BITXOR, ValueOp.SHL, ValueOp.SHR)


def bitwise(op: ValueOp, a: int, b: int, bits: int) -> int:
    """``a op b`` of Python integers (two's complement without end; ``convert`` keeps the
    low ``bits``): a shift by a count outside 0..bits-1 gives 0, or the sign for >>."""
    if op is ValueOp.BITAND:
        return a & b
    if op is ValueOp.BITOR:
        return a | b
    if op is ValueOp.BITXOR:
        return a ^ b
    if not 0 <= b < bits:
        return -1 if op is ValueOp.SHR and a < 0 else 0
    return a << b if op is ValueOp.SHL else a >> b


def _compared(op: CmpOp, a, b) -> bool:
    """``a op b``, written here (not taken from polymap) so the oracle stays independent."""
    if op is CmpOp.LT:
        return bool(a < b)
    if op is CmpOp.LE:
        return bool(a <= b)
    if op is CmpOp.GT:
        return bool(a > b)
    if op is CmpOp.GE:
        return bool(a >= b)
    return bool(a == b) if op is CmpOp.EQ else bool(a != b)


def is_nan(x) -> bool:
    return isinstance(x, np.floating) and math.isnan(x)


def nan_max(a, b):
    # of two equal values (0.0 and -0.0) the second, as np.maximum and C's a > b ? a : b do;
    # Python's max keeps the first (hypothesis found W max= -(0 + 0) giving +0.0 here)
    if is_nan(a) or is_nan(b):
        return a if is_nan(a) else b
    return a if a > b else b


def nan_min(a, b):
    if is_nan(a) or is_nan(b):
        return a if is_nan(a) else b
    return a if a < b else b
