"""The NumPy reference executor: the ground truth every generated kernel is compared with.

``reference(program, **arrays)`` checks the program with the polyhedral model (race freedom,
bounds) and runs it; ``execute(program, arrays)`` runs it unchecked and also counts the
executed instances of every statement.

Vectorization. Every par loop adds a leading axis of *lanes*: its index is
``np.arange(extent)`` shaped ``(extent, 1, ..., 1)``, so it broadcasts against the indices of
the enclosing par loops (numpy aligns shapes from the right, so prepending an axis never
reshapes what exists). A seq loop is a Python loop; its index is an int. A seq loop that
only accumulates into one element per lane (``C[i, j] += A[i, k] * B[k, j]``) keeps that
element in a local array, updated in loop order with the store's promotion and cast at
every step, and stores it once (``_Executor.accumulate``): the same values, without a
gather and a scatter of every lane per iteration. Extents that vary
per lane (triangular domains) run to their largest active value under a boolean *mask* of
the active lanes. Each statement then runs once over all lanes. That is equivalent to the
per-iteration order because the iterations of a par loop are independent (proved by
``analyze``), and each lane still sees its own statements in textual and seq order.

Value typing (C-like, ``polymap/ir/value_types.py``; compute types ``i32 < i64 < f32 < f64``):

* A read gives its buffer's values in their compute type: f16 and bf16 as f32, i8, u8 and
  bool as i32. Literals and index values are weakly typed: they take the statement's
  *computation dtype*, the promotion of the dtypes of the buffers its value reads, or the
  target's compute type when it reads none (f32 for an anchor that reads none). A
  non-integral literal in an integer computation is f32 (as in C, ``2 * 2.5`` is 5.0).
* A binary operation computes in the promotion of its operands (i32 with f32 gives f32,
  not numpy's f64). ``/`` is true division for floats and C division (truncating toward
  zero) for integers; an integer division by zero is an ArgumentError naming the statement.
* ``exp log sqrt tanh`` of an integer compute in f32; ``abs max min`` keep the type; ``max``
  and ``min`` propagate NaN (as ``np.maximum``).
* The result is converted to the target's dtype on store (``to_dtype``): float to an
  integer truncates toward zero, saturates and gives 0 for NaN (what a GPU's conversion
  does); f16 and bf16 round to nearest even. ``+= -= *= max= min=`` combine the old and
  the new value in their promotion, then convert.

Initial contents: ``out`` buffers are zeros; temporaries (``new``) are undefined in the
language, so they are filled with NaN (floats), the integer farthest from zero (integers) or
1 (bool), which makes a read before a write visible in comparisons. Float exceptions are
silent: inf and NaN are values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from polymap.arrays import is_device_array
from polymap.errors import ArgumentError, InternalError
from polymap.ir.gather_faults import gather_error
from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    BufferKind,
    Call,
    Compare,
    Const,
    DType,
    Fn,
    Gather,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    INeg,
    IVar,
    LogicOp,
    Loop,
    Neg,
    New,
    Not,
    Program,
    Read,
    Select,
    Stmt,
    ValueExpr,
    ValueOp,
    index_vars,
    reads_of,
)
from polymap.ir.validate import check_program_argument
from polymap.ir.value_types import (
    bitwise_type,
    comparison_type,
    float_type,
    literal_type,
    predicate_type,
    promote,
    statement_type,
)
from polymap.ir.walk import statements

__all__ = ["Execution", "execute", "reference"]


@dataclass(frozen=True, slots=True)
class Execution:
    """The result of :func:`execute`."""

    outputs: dict[str, np.ndarray]  # every out and inout buffer, fresh arrays
    instances: dict[str, int]  # executed instances per statement name (S0, S1, ...)
    sizes: dict[str, int]  # every size parameter's value (given, inferred or default)


def reference(program: Program, **arrays) -> dict[str, np.ndarray]:
    """Run ``program`` on NumPy arrays and return its ``out`` and ``inout`` buffers.

    The program is first proved race free and in bounds by ``polymap.poly.model.analyze``
    (raising RaceError, BoundsError or NotAffineError), which is what makes the vectorized
    execution correct. Inputs (every ``in`` and ``inout`` buffer, by name) must have the
    declared dtype exactly and the declared shape; unbound sizes are taken from arguments
    that name them (``W=4``), then from input dimensions declared as a bare size name
    (which must agree), then from defaults. The caller's arrays are
    never modified. Bad arguments raise :class:`ArgumentError`.
    """
    from polymap.poly.model import analyze  # lazy: the model imports isl

    check_program_argument(program, "reference")
    bound, inputs = _prepare(program, arrays)
    analyze(bound)
    return _Executor(bound, inputs).run().outputs


def execute(program: Program, arrays: dict) -> Execution:
    """Like :func:`reference` without the analysis (for tests and internal use): also
    reports how many instances of each statement ran."""
    bound, inputs = _prepare(program, arrays)
    return _Executor(bound, inputs).run()


# ------------------------------------------------------------------ arguments


def _prepare(program: Program, arrays: dict) -> tuple[Program, dict[str, np.ndarray]]:
    """Check the arrays against the declarations, bind every size, and return the bound
    program with private copies of the inputs."""
    ctx = program.error_context()
    decls = {b.name: b for b in program.buffers}
    inputs = {b.name: b for b in program.inputs}
    arrays, fixed = split_sizes(program, arrays, ctx)
    expected = f"the inputs of program '{program.name}' are {', '.join(inputs) or 'none'}"
    if program.param_names:
        expected += f" (sizes may be given too: {', '.join(program.param_names)})"
    for name in arrays:
        if name in inputs:
            continue
        kind = decls[name].kind if name in decls else None
        if kind is BufferKind.OUT:
            why = f"'{name}' is an out buffer: it needs no input (it starts as zeros)"
        elif kind is BufferKind.NEW:
            why = f"'{name}' is a temporary (new) buffer: it takes no input"
        else:
            why = f"unknown buffer '{name}'"
        raise ArgumentError(f"{why}; {expected}", **ctx)
    for name, decl in inputs.items():
        if name not in arrays:
            raise ArgumentError(f"missing input '{name}' ({decl}); {expected}", **ctx)
    given = {name: _as_array(decl, arrays[name], ctx) for name, decl in inputs.items()}
    sizes = _infer_sizes(program, given, ctx, fixed)
    bound = program.bind(**sizes)
    for decl in bound.inputs:
        want, got = _shape(decl, ctx), given[decl.name].shape
        if want != got:
            raise ArgumentError(
                f"input '{decl.name}' ({decls[decl.name]}) has the wrong shape: expected {want}, got {got}",
                **ctx,
            )
    # np.array copies: the caller's arrays are never written, even by an inout buffer.
    return bound, {name: np.array(arr) for name, arr in given.items()}


def _from_dlpack(decl: BufferDecl, value, ctx: dict) -> np.ndarray:
    """A host DLPack producer's array (no copy). Where NumPy cannot take it that way, its
    ``__array__`` if it has one; else the producer's own error, named."""
    try:
        return np.from_dlpack(value)
    except Exception as exc:  # noqa: BLE001 - whatever the producer raises is reported, not leaked
        if hasattr(value, "__array__"):
            return np.asarray(value)
        raise ArgumentError(
            f"input '{decl.name}' could not be read through DLPack: {type(exc).__name__}: {exc}", **ctx
        ) from None


def _as_array(decl: BufferDecl, value, ctx: dict) -> np.ndarray:
    # exactly Python's int and float: NumPy's scalars (np.float64 subclasses float) keep the
    # dtype check that arrays get
    if type(value) in (int, float) and not decl.shape:
        return _python_number(decl, value, ctx)
    if is_device_array(value):
        raise ArgumentError(
            f"input '{decl.name}' is a GPU array: the reference executor runs on the host "
            "(copy it there first, e.g. .get() or .cpu())",
            **ctx,
        )
    try:
        # a host array of another library through DLPack (a PyTorch CPU tensor, say); NumPy's own
        # and anything else through asarray
        dlpack = hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray)
        arr = _from_dlpack(decl, value, ctx) if dlpack else np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. ragged nested lists
        raise ArgumentError(f"input '{decl.name}' cannot be made an array: {exc}", **ctx) from None
    if arr.dtype.kind not in "biufc" and arr.dtype != decl.dtype.numpy:  # bf16's kind is "V"
        raise ArgumentError(
            f"input '{decl.name}' is not a numeric array: got {type(value).__name__} "
            f"(numpy dtype {arr.dtype}), expected a {decl.dtype.numpy} array",
            **ctx,
        )
    if arr.dtype != decl.dtype.numpy:
        raise ArgumentError(
            f"input '{decl.name}' ({decl}) has the wrong dtype: expected {decl.dtype.numpy}, got {arr.dtype}",
            **ctx,
        )
    if arr.ndim != len(decl.shape):
        raise ArgumentError(
            f"input '{decl.name}' ({decl}) has the wrong shape: expected {len(decl.shape)} "
            f"dimension(s) [{', '.join(map(str, decl.shape))}], got shape {arr.shape}",
            **ctx,
        )
    return arr


def _python_number(decl: BufferDecl, value: int | float, ctx: dict) -> np.ndarray:
    """A Python number for a scalar input (``alpha=2.0`` for ``in alpha: f32``): converted to
    the declared type when it fits, as a NumPy scalar of that type would be; refused when it
    does not (a float for an integer, an integer out of range, a finite float that would
    overflow to infinity)."""
    dtype = decl.dtype.numpy
    if not decl.dtype.is_float:
        lo, hi = (0, 1) if decl.dtype is DType.BOOL else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        if isinstance(value, float):
            raise ArgumentError(
                f"input '{decl.name}' ({decl}): the Python number {value!r} is a float; the input "
                f"is {decl.dtype.value} and takes a Python int",
                **ctx,
            )
        if not lo <= value <= hi:
            raise ArgumentError(
                f"input '{decl.name}' ({decl}): the Python number {value!r} does not fit {decl.dtype.numpy} "
                f"(an integer in [{lo}, {hi}])",
                **ctx,
            )
        return np.asarray(value, dtype=dtype)
    try:
        number = float(value)  # a Python int beyond the doubles: too large for any float type
    except OverflowError:
        raise ArgumentError(
            f"input '{decl.name}' ({decl}): the Python number {value!r} overflows {decl.dtype.numpy}", **ctx
        ) from None
    with np.errstate(over="ignore"):
        converted = np.asarray(number, dtype=dtype)
    if math.isfinite(number) and not np.isfinite(converted.astype(np.float64)):
        raise ArgumentError(
            f"input '{decl.name}' ({decl}): the Python number {value!r} overflows {decl.dtype.numpy}", **ctx
        )
    return converted


def split_sizes(program: Program, arrays: dict, ctx: dict) -> tuple[dict, dict[str, int]]:
    """The arguments that name a size of ``program`` (``W=5``: a size no input's shape gives,
    or one checked against the shapes), apart from the arrays; each must be an integer."""
    names = set(program.param_names)
    sizes = {}
    for name, value in arrays.items():
        if name not in names:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ArgumentError(
                f"size {name} of program '{program.name}' takes an integer, got {type(value).__name__}", **ctx
            )
        if value < 0:
            raise ArgumentError(
                f"size {name} of program '{program.name}' is {value}: a size is not negative", **ctx
            )
        sizes[name] = int(value)
    return {k: v for k, v in arrays.items() if k not in sizes}, sizes


def _infer_sizes(
    program: Program, given: dict[str, np.ndarray], ctx: dict, fixed: dict[str, int] | None = None
) -> dict[str, int]:
    """Sizes given as arguments (``fixed``), then from input dimensions declared as exactly
    a size name (which must agree with them), then defaults."""
    unbound = set(program.param_names)
    sizes: dict[str, int] = dict(fixed or {})
    source: dict[str, str] = {name: f"the argument {name}={value}" for name, value in sizes.items()}
    for decl in program.inputs:
        for dim, expr in enumerate(decl.shape):
            if not (isinstance(expr, IVar) and expr.name in unbound):
                continue
            value, here = given[decl.name].shape[dim], f"dimension {dim} of '{decl.name}'"
            if expr.name in sizes and sizes[expr.name] != value:
                raise ArgumentError(
                    f"conflicting values for size {expr.name}: {sizes[expr.name]} from "
                    f"{source[expr.name]}, {value} from {here}",
                    **ctx,
                )
            sizes.setdefault(expr.name, value)
            source.setdefault(expr.name, here)
    for param in program.params:
        if param.name not in sizes and param.default is not None:
            sizes[param.name] = param.default
    for name in program.param_names:
        if name not in sizes:
            raise ArgumentError(
                f"size {name} of program '{program.name}' is unbound: no input has a dimension "
                f"declared as exactly {name} and it has no default; give it ({name}=...) or bind it "
                f"first with program.bind({name}=...)",
                **ctx,
            )
    return sizes


def _shape(decl: BufferDecl, ctx: dict) -> tuple[int, ...]:
    """The concrete shape of a declaration in a bound program."""
    if not all(isinstance(e, IConst) for e in decl.shape):
        raise InternalError(f"shape of '{decl.name}' is not constant after binding: {decl}")
    shape = tuple(e.value for e in decl.shape)
    if any(n < 0 for n in shape):
        raise ArgumentError(f"buffer '{decl.name}' ({decl}) has a negative extent: {shape}", **ctx)
    return shape


# ------------------------------------------------------------------ execution

Index = int | np.ndarray  # an index value: one int for every lane, or one per lane

_F32 = np.dtype(np.float32)


_DTYPES = {dt.numpy: dt for dt in DType}


def _dtype(dtype: np.dtype) -> DType:
    """The language's type of a NumPy dtype (of a buffer, or of a computed value)."""
    return _DTYPES[np.dtype(dtype)]


def _promote(*dtypes: np.dtype) -> np.dtype:
    """C-like promotion of computed values (``value_types.promote``): i32 < i64 < f32 < f64."""
    return promote(*(_dtype(d) for d in dtypes)).numpy


def _is_int(values: np.ndarray) -> bool:
    """Whether computed values are of an integer type (i32 or i64)."""
    return values.dtype.kind in "iu"


def _widened(values: np.ndarray) -> np.ndarray:
    """Values read from a buffer, in their compute type (f16 and bf16 as f32; i8, u8 and
    bool as i32; the others as they are)."""
    dtype = _dtype(values.dtype)
    return values.astype(dtype.compute.numpy) if dtype.is_storage else values


def _undefined(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    if dtype.is_float:
        fill = np.nan
    elif dtype is DType.BOOL:
        fill = True
    else:  # the value farthest from zero, so that a read before a write shows
        info = np.iinfo(dtype.numpy)
        fill = info.min if info.min < 0 else info.max
    return np.full(shape, fill, dtype.numpy)


def _holds(cond, env: dict):
    """An if's condition (comparisons of index values) per lane: a bool or a bool array."""
    if isinstance(cond, Not):
        return np.logical_not(_holds(cond.operand, env))
    if isinstance(cond, Compare):
        return cond.op.holds(_index(cond.lhs.expr, env), _index(cond.rhs.expr, env))
    join = np.logical_and if cond.op is LogicOp.AND else np.logical_or
    return join(_holds(cond.lhs, env), _holds(cond.rhs, env))


def _and(mask: np.ndarray | None, more: np.ndarray) -> np.ndarray:
    return more if mask is None else mask & more


@dataclass(frozen=True, slots=True)
class _Lanes:
    """The vectorization state inside the par loops around a point of the program."""

    shape: tuple[int, ...]  # one axis per enclosing par loop, innermost first
    mask: np.ndarray | None  # active lanes (broadcastable to shape); None: all
    index: tuple[np.ndarray, ...]  # the enclosing par indices, innermost first

    def active(self) -> int:
        if self.mask is None:
            return math.prod(self.shape)
        return int(np.count_nonzero(np.broadcast_to(self.mask, self.shape)))


@dataclass(frozen=True, slots=True)
class _Storage:
    """A buffer's array. A block-local buffer has one private copy per lane of the par
    loops around its declaration: leading axes indexed by those loops' indices."""

    array: np.ndarray
    lanes: tuple[np.ndarray, ...] = ()


_INDEX_OPS = {
    IndexOp.ADD: lambda a, b: a + b,
    IndexOp.SUB: lambda a, b: a - b,
    IndexOp.MUL: lambda a, b: a * b,
    # Python and numpy `//` and `%` are floor division and floor modulo, as in the IR.
    IndexOp.FLOORDIV: lambda a, b: a // b,
    IndexOp.MOD: lambda a, b: a % b,
    IndexOp.MIN: np.minimum,  # of two ints an int, of lanes per lane
    IndexOp.MAX: np.maximum,
}
_VALUE_OPS = {ValueOp.ADD: np.add, ValueOp.SUB: np.subtract, ValueOp.MUL: np.multiply}
_BITWISE_OPS = {ValueOp.BITAND: np.bitwise_and, ValueOp.BITOR: np.bitwise_or, ValueOp.BITXOR: np.bitwise_xor}
_ASSIGN_OPS = {
    AssignOp.ADD: np.add,
    AssignOp.SUB: np.subtract,
    AssignOp.MUL: np.multiply,
    AssignOp.DIV: np.true_divide,
    AssignOp.MAX: np.maximum,
    AssignOp.MIN: np.minimum,
}
# the updates an accumulation applies in place, with no new array per iteration, where the
# target's type is the computation's (an integer ``/=`` needs its zero check: not here)
_IN_PLACE = {op: ufunc for op, ufunc in _ASSIGN_OPS.items() if op is not AssignOp.DIV}
_erf = np.vectorize(math.erf, otypes=[np.float64])  # NumPy has no erf; the C library's, per element


def _c_pow(x, y):
    """C's pow (C99 Annex F): NumPy's power except where the base is a zero or -inf and the
    exponent positive but not an odd integer, where C gives +0 and +inf (NumPy -0 or NaN).

    A float32 power is taken in float64 and rounded once: NumPy's own float32 power is not
    correctly rounded and changed between releases (2.4 gives 5 ** -2.5 one ulp below the
    rounding of the exact value, which the C library's powf gives), and the ground truth must
    not depend on the NumPy that is installed."""
    if x.dtype == np.float32:
        result = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    else:
        result = np.power(x, y)
    odd = (np.mod(y, 2) == 1) & (np.floor(y) == y)
    special = ((x == 0) | (x == -np.inf)) & (y > 0) & ~odd
    return np.where(special, np.where(x == 0, 0, np.inf).astype(result.dtype), result)


def _sigmoid(x):
    return np.reciprocal(1 + np.exp(-x))


# functions of a float (an i32 argument is converted to f32 first), in the argument's type
_FLOAT_FNS = {
    Fn.EXP: np.exp,
    Fn.LOG: np.log,
    Fn.SQRT: np.sqrt,
    Fn.TANH: np.tanh,
    Fn.SIN: np.sin,
    Fn.COS: np.cos,
    Fn.ERF: lambda x: _erf(x).astype(x.dtype),
    Fn.RSQRT: lambda x: np.reciprocal(np.sqrt(x)),
    Fn.SIGMOID: _sigmoid,
}


def _index(expr: IndexExpr, env: dict[str, Index]) -> Index:
    if isinstance(expr, IConst):
        return expr.value
    if isinstance(expr, IVar):
        if expr.name not in env:
            raise InternalError(f"index '{expr.name}' has no value (unbound size or out of scope)")
        return env[expr.name]
    if isinstance(expr, INeg):
        return -_index(expr.operand, env)
    return _INDEX_OPS[expr.op](_index(expr.lhs, env), _index(expr.rhs, env))


class _Executor:
    def __init__(self, program: Program, inputs: dict[str, np.ndarray]) -> None:
        self.program = program
        self.ctx = program.error_context()
        self.instances = {s.name: 0 for s in statements(program)}
        dtypes = {b.name: b.dtype for b in program.all_buffers()}
        self.compute_dtype = {
            s.name: statement_type(s.stmt, dtypes.__getitem__).numpy for s in statements(program)
        }
        self.predicate_dtype = {
            s.name: predicate_type(s.stmt, dtypes.__getitem__).numpy
            for s in statements(program)
            if s.stmt.predicate is not None
        }
        self.dtype_of = dtypes.__getitem__
        self.globals: dict[str, _Storage] = {}
        for decl in program.buffers:
            if decl.kind in (BufferKind.IN, BufferKind.INOUT):
                array = inputs[decl.name]
            elif decl.kind is BufferKind.OUT:
                array = np.zeros(_shape(decl, self.ctx), decl.dtype.numpy)
            else:
                array = _undefined(_shape(decl, self.ctx), decl.dtype)
            self.globals[decl.name] = _Storage(array)

    def run(self) -> Execution:
        with np.errstate(all="ignore"):
            self.block(self.program.body, {}, _Lanes((), None, ()), self.globals)
        outputs = {b.name: self.globals[b.name].array for b in self.program.outputs}
        return Execution(outputs, dict(self.instances), self.program.sizes)

    def block(self, body: tuple[Stmt, ...], env: dict, lanes: _Lanes, buffers: dict) -> None:
        if any(isinstance(s, New) for s in body):
            buffers = dict(buffers)  # block-local buffers go out of scope with the block
        for stmt in body:
            if isinstance(stmt, New):
                # A fresh copy per execution of the block and per lane of the par loops around.
                array = _undefined(lanes.shape + _shape(stmt.decl, self.ctx), stmt.decl.dtype)
                buffers[stmt.decl.name] = _Storage(array, lanes.index)
            elif isinstance(stmt, Loop):
                self.loop(stmt, env, lanes, buffers)
            else:
                self.statement(stmt, env, lanes, buffers)

    def loop(self, loop: Loop, env: dict, lanes: _Lanes, buffers: dict) -> None:
        extent = _index(loop.extent, env)
        varying = isinstance(extent, np.ndarray)  # the extent differs between lanes
        if varying:  # run to the largest extent of an active lane, masking the others
            active = extent if lanes.mask is None else np.where(lanes.mask, extent, 0)
            count = int(active.max())
        else:
            count = int(extent)
        if count <= 0:
            return
        if loop.is_par:
            index = np.arange(count).reshape((count,) + (1,) * len(lanes.shape))
            mask = _and(lanes.mask, index < extent) if varying else lanes.mask
            inner = _Lanes((count,) + lanes.shape, mask, (index,) + lanes.index)
            self.block(loop.body, {**env, loop.index: index}, inner, buffers)
        elif not varying and (accumulated := _accumulation(loop)) is not None:
            self.accumulate(loop, accumulated, count, env, lanes, buffers)
        else:
            for k in range(count):
                inner = replace(lanes, mask=_and(lanes.mask, k < extent)) if varying else lanes
                self.block(loop.body, {**env, loop.index: k}, inner, buffers)

    def accumulate(
        self, loop: Loop, stmt: Assign, count: int, env: dict, lanes: _Lanes, buffers: dict
    ) -> None:
        """A seq loop whose body is one update of an element that does not depend on the
        loop (``C[i, j] += A[i, k] * B[k, j]``): the elements are read once, updated in a
        local array step by step in loop order, with the store's own promotion and cast at
        every step, and written back once. The same values as a store per iteration (the
        gather and scatter of every lane per iteration were most of the reference's time)."""
        active = lanes.active()
        if active == 0:
            return
        self.instances[stmt.name] += active * count
        target, idx = self.element_index(stmt, env, lanes, buffers)
        acc = np.array(_widened(target[idx]))  # its own copy: updated in place below
        in_place = _IN_PLACE.get(stmt.op)
        scratch = None  # the iteration's values, one array for all (no allocation per step)
        for k in range(count):
            values = _Eval(self, stmt, {**env, loop.index: k}, lanes, buffers).value(stmt.value, out=scratch)
            if (
                scratch is None
                and values.shape == lanes.shape
                and values.flags.writeable
                and values.base is None
            ):
                scratch = values  # a fresh array of the lanes' shape: reused from the next step
            value = _per_active_lane(values, lanes)
            if in_place is not None and acc.dtype == target.dtype == _promote(acc.dtype, value.dtype):
                # computed and stored in one type: the update's rounding is the ufunc's own
                in_place(acc, value, out=acc)
                continue
            # stored at every step, as a store per iteration would: a narrow target rounds
            # each partial result
            acc = _widened(self.updated(stmt, acc, value, target.dtype))
        target[idx] = to_dtype(acc, target.dtype)

    def updated(self, stmt: Assign, old, value, dtype):
        """``_updated`` for ``stmt``: an integer ``/=`` by zero is its ArgumentError."""
        try:
            return _updated(stmt.op, old, value, dtype)
        except _ZeroDivisor as zero:
            raise ArgumentError(
                f"statement {stmt.name} ({stmt}): {zero.args[0]} division by zero at run time",
                loc=stmt.loc,
                **self.ctx,
            ) from None

    def statement(self, stmt: Assign | Anchor, env: dict, lanes: _Lanes, buffers: dict) -> None:
        if stmt.guard is not None:  # the if around it: only the lanes where it holds run it
            holds = np.asarray(_holds(stmt.guard, env))
            if holds.ndim == 0:
                if not holds:
                    return
            else:
                lanes = replace(lanes, mask=_and(lanes.mask, holds))
        active = lanes.active()
        if active == 0:  # also keeps masked-off reads from touching an empty buffer
            return
        self.instances[stmt.name] += active
        if stmt.predicate is not None:  # a data condition: every instance evaluates it
            judge = _Eval(self, stmt, env, lanes, buffers, self.predicate_dtype[stmt.name])
            holds = judge.condition(stmt.predicate)
            holds = np.broadcast_to(holds, lanes.shape)
            lanes = replace(lanes, mask=_and(lanes.mask, holds))
            if lanes.active() == 0:
                return
        evaluate = _Eval(self, stmt, env, lanes, buffers)
        value = evaluate.value(stmt.value)
        if isinstance(stmt, Assign) and stmt.is_atomic:
            self.atomic_update(stmt, value, evaluate, lanes, buffers)
        elif isinstance(stmt, Assign):
            self.store(stmt, value, env, lanes, buffers)

    def element_index(self, stmt: Assign, env: dict, lanes: _Lanes, buffers: dict):
        """The array ``stmt`` writes and the index of each active lane's element in it (a
        tuple of index arrays, one entry per active lane, in lane order)."""
        target = buffers[stmt.buffer].array
        idx = buffers[stmt.buffer].lanes + tuple(_index(e, env) for e in stmt.indices)
        if not idx:  # a 0-d buffer: its one element, through a 1-element view
            target, idx = target.reshape(1), (0,)
        # One element per lane: broadcast indices to the lane shape, then keep the active
        # lanes only (masked-off lanes may compute out-of-bounds indices).
        idx = tuple(np.broadcast_to(x, lanes.shape) for x in idx)
        if lanes.mask is not None:
            mask = np.broadcast_to(lanes.mask, lanes.shape)
            idx = tuple(x[mask] for x in idx)
        return target, idx

    def atomic_update(self, stmt: Assign, value, evaluate: _Eval, lanes: _Lanes, buffers: dict) -> None:
        """Atomic updates (a scatter's, ``O[I[i]] += x``, or ``atomic``), applied one lane after another in
        the order of the loops (``ufunc.at``: lanes that meet on an element each update it).
        As the GPU's atomic does, each adds (or subtracts, or takes the max or min of) the
        value converted to the target's type. The gathered indices are checked as a read's
        (``BoundsError``)."""
        storage = buffers[stmt.buffer]
        target = storage.array
        idx = tuple(
            evaluate.gathered(stmt.target, k, e) if isinstance(e, Gather) else _index(e, evaluate.env)
            for k, e in enumerate(stmt.indices)
        )
        if not idx:  # a 0-d buffer: its one element, through a 1-element view
            target, idx = target.reshape(1), (0,)
        # the lanes' axes run innermost loop first: reversed (``.T``), their order is the
        # program's, which the floats' rounding follows
        idx = tuple(np.broadcast_to(x, lanes.shape).T for x in storage.lanes + idx)
        value = np.broadcast_to(to_dtype(np.asarray(value), target.dtype), lanes.shape).T
        if lanes.mask is not None:
            mask = np.broadcast_to(lanes.mask, lanes.shape).T
            idx, value = tuple(x[mask] for x in idx), value[mask]
        else:
            idx, value = tuple(x.reshape(-1) for x in idx), value.reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):
            _ASSIGN_OPS[stmt.op].at(target, idx, value)

    def store(self, stmt: Assign, value, env: dict, lanes: _Lanes, buffers: dict) -> None:
        target, idx = self.element_index(stmt, env, lanes, buffers)
        value = _per_active_lane(value, lanes)
        # Race freedom: distinct active lanes write distinct elements, so this gather /
        # scatter equals a per-lane read-modify-write (no duplicate indices to collide).
        if stmt.op.is_update:
            target[idx] = self.updated(stmt, _widened(target[idx]), value, target.dtype)
        else:
            target[idx] = to_dtype(np.asarray(value), target.dtype)


def _per_active_lane(value, lanes: _Lanes) -> np.ndarray:
    """``value`` broadcast to the lanes, one entry per active lane in lane order (the order
    of ``element_index``)."""
    value = np.broadcast_to(value, lanes.shape)
    if lanes.mask is not None:
        value = value[np.broadcast_to(lanes.mask, lanes.shape)]
    return value


class _ZeroDivisor(Exception):
    """An integer ``/=`` by zero on an active lane (the argument: the type's name): the
    caller names the statement."""


def _updated(op: AssignOp, old: np.ndarray, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``old op= value`` as a store does it: in the promotion of the two (``old`` in its
    compute type), cast to ``dtype`` (``value`` holds the active lanes only; ``/=`` divides
    as ``/``)."""
    common = _promote(old.dtype, value.dtype)
    # no copy where a side is in the common type already (the ufunc below makes a new array)
    a, b = old.astype(common, copy=False), value.astype(common, copy=False)
    if op is AssignOp.DIV and _is_int(a):
        if np.any(b == 0):
            raise _ZeroDivisor(_dtype(common).value)
        return to_dtype(_truncating_divide(a, b), dtype)
    return to_dtype(np.asarray(_ASSIGN_OPS[op](a, b)), dtype)


def _truncating_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero, as in C (``b`` nonzero)."""
    q = np.floor_divide(a, b)
    # Floor and truncation differ by one when the division is inexact and the signs differ.
    return (q + ((q * b != a) & ((a < 0) != (b < 0)))).astype(a.dtype)


class _Eval:
    """Evaluates one statement's value over all lanes (active or not)."""

    def __init__(
        self, ex: _Executor, stmt, env: dict, lanes: _Lanes, buffers: dict, dtype: np.dtype | None = None
    ) -> None:
        """``dtype``: the type literals and index values take (by default the statement's
        computation type; its predicate's has its own, ``predicate_type``)."""
        self.ex, self.stmt, self.env, self.lanes, self.buffers = ex, stmt, env, lanes, buffers
        self.dtype = ex.compute_dtype[stmt.name] if dtype is None else dtype
        # the statement's (or predicate's) own type: literals take it again below a
        # conversion inside a bitwise operation (``bitwise``), and a comparison that reads
        # no buffer gives it to its literals (``comparison_type``)
        self.root = self.dtype
        # the lanes for which the value being evaluated is the one C computes: all of them,
        # except inside a select's branch or the right side of and/or (C evaluates only the
        # chosen branch and short-circuits), where an i32 division by zero is no fault
        self.chosen = None

    def value(self, e: ValueExpr, out: np.ndarray | None = None):
        """``e``'s values over the lanes. ``out``: an array the caller reuses, which a
        top-level ``+ - *`` writes its result into where the shape and type are its own."""
        if isinstance(e, Const):
            # A non-integral literal is a float even among integers (C: 2 * 2.5 is 5.0).
            return np.asarray(e.value).astype(literal_type(e.value, _dtype(self.dtype)).numpy)
        if isinstance(e, IndexValue):
            return np.asarray(_index(e.expr, self.env)).astype(self.dtype)
        if isinstance(e, Read):
            return self.read(e)
        if isinstance(e, Neg):
            return np.negative(self.value(e.operand))
        if isinstance(e, Binary) and e.op.is_bitwise:
            return self.bitwise(e)
        if isinstance(e, Binary):
            a, b = self.value(e.lhs), self.value(e.rhs)
            common = _promote(a.dtype, b.dtype)
            a, b = a.astype(common, copy=False), b.astype(common, copy=False)
            if e.op is ValueOp.DIV:
                return self.c_divide(a, b) if _is_int(a) else np.true_divide(a, b)
            if e.op is ValueOp.MOD:
                return self.floored_mod(a, b) if _is_int(a) else np.mod(a, b)
            if out is not None and out.dtype == common and out.shape == np.broadcast_shapes(a.shape, b.shape):
                return _VALUE_OPS[e.op](a, b, out=out)
            return _VALUE_OPS[e.op](a, b)
        if isinstance(e, Select):
            cond = self.condition(e.cond)
            then = self.only_where(cond, self.value, e.then)
            otherwise = self.only_where(~cond, self.value, e.otherwise)
            common = _promote(then.dtype, otherwise.dtype)
            return np.where(cond, then.astype(common, copy=False), otherwise.astype(common, copy=False))
        if isinstance(e, Call):
            if e.fn.cast is not None:  # stored in the type, read back in its compute type
                return _widened(to_dtype(self.in_type(self.root, self.value, e.args[0]), e.fn.cast.numpy))
            args = [self.value(a) for a in e.args]
            if e.fn in _FLOAT_FNS:
                x = args[0]
                return _FLOAT_FNS[e.fn](x.astype(_F32) if _is_int(x) else x)
            if e.fn is Fn.ABS:
                return np.abs(args[0])
            if e.fn in (Fn.FLOOR, Fn.CEIL):
                x = args[0]
                return x if _is_int(x) else (np.floor if e.fn is Fn.FLOOR else np.ceil)(x)
            common = _promote(args[0].dtype, args[1].dtype)
            if e.fn is Fn.POW:
                common = float_type(_dtype(common)).numpy
                return _c_pow(args[0].astype(common, copy=False), args[1].astype(common, copy=False))
            if e.fn is Fn.NEXTAFTER:  # in the float type of the two, as C's nextafterf
                common = float_type(_dtype(common)).numpy
                return np.nextafter(args[0].astype(common, copy=False), args[1].astype(common, copy=False))
            fn = np.maximum if e.fn is Fn.MAX else np.minimum
            return fn(args[0].astype(common, copy=False), args[1].astype(common, copy=False))
        raise InternalError(f"unknown value expression {e!r}")

    def bitwise(self, e: Binary) -> np.ndarray:
        """``& | ^ << >>`` of two integers in the operation's type (``bitwise_type``), which
        its literals and index values take in place of the statement's. A shift by a count
        outside 0..bits-1 gives 0 (<<) or the sign (>>): written out here, not left to what
        NumPy does there."""
        own = bitwise_type(e, self.ex.dtype_of).numpy
        a, b = (self.in_type(own, self.value, x).astype(own, copy=False) for x in (e.lhs, e.rhs))
        if e.op in _BITWISE_OPS:
            return _BITWISE_OPS[e.op](a, b)
        bits = a.dtype.itemsize * 8
        inside = (b >= 0) & (b < bits)
        count = np.where(inside, b, 0)
        if e.op is ValueOp.SHL:  # wraps, as two's complement does
            return np.where(inside, np.left_shift(a, count), 0).astype(a.dtype)
        return np.where(inside, np.right_shift(a, count), np.where(a < 0, -1, 0)).astype(a.dtype)

    def condition(self, c) -> np.ndarray:
        """A condition's truth per lane (a bool array): comparisons in the promotion of
        their operands, as in C (NaN compares unequal to everything)."""
        if isinstance(c, Compare):  # literals in the type of what it reads (``comparison_type``)
            own = comparison_type(c, _dtype(self.root), self.ex.dtype_of).numpy
            a, b = self.in_type(own, self.value, c.lhs), self.in_type(own, self.value, c.rhs)
            common = _promote(a.dtype, b.dtype)
            return np.asarray(c.op.holds(a.astype(common, copy=False), b.astype(common, copy=False)))
        if isinstance(c, Not):
            return ~self.condition(c.operand)
        lhs = self.condition(c.lhs)
        if c.op is LogicOp.AND:
            return lhs & self.only_where(lhs, self.condition, c.rhs)
        return lhs | self.only_where(~lhs, self.condition, c.rhs)

    def in_type(self, dtype: np.dtype, evaluate, e):
        """``evaluate(e)`` with literals and index values in ``dtype``: a bitwise operation's
        operands in its ``bitwise_type``; a conversion's argument in the statement's own
        type, as outside any bitwise operation around it (``i64(d[i] * 0.3) << 0``: 0.3 is
        the f64 of an f64 statement, not an i64's f32); a comparison's operands in its
        ``comparison_type``."""
        outer, self.dtype = self.dtype, dtype
        try:
            return evaluate(e)
        finally:
            self.dtype = outer

    def only_where(self, chosen: np.ndarray, evaluate, e):
        """``evaluate(e)`` where C computes ``e`` only on the lanes ``chosen``."""
        outer = self.chosen
        self.chosen = chosen if outer is None else outer & chosen
        try:
            return evaluate(e)
        finally:
            self.chosen = outer

    def read(self, r: Read):
        storage = self.buffers[r.buffer]
        idx = tuple(
            self.gathered(r, k, e) if isinstance(e, Gather) else _index(e, self.env)
            for k, e in enumerate(r.indices)
        )
        if self.lanes.mask is not None:
            # Masked-off lanes may compute indices outside the buffer: point them at
            # element 0 (their values are never stored). An int index is the same on every
            # lane, including an active one, so it is in bounds already.
            idx = tuple(np.where(self.lanes.mask, x, 0) if isinstance(x, np.ndarray) else x for x in idx)
        return _widened(storage.array[storage.lanes + idx])

    def gathered(self, r: Read, k: int, g: Gather):
        """The value of a gathered index (position ``k`` of ``r``), read from its source and
        checked against the dimension: outside it, where C reads it (an active lane, the chosen
        operand of a select), is the data's fault, a ``BoundsError`` as the emitted code's."""
        values = np.asarray(self.read(g.source))
        extent = self.buffers[r.buffer].array.shape[k - len(r.indices)]
        outside = (values < 0) | (values >= extent)
        fault = self.where_computed(outside)
        if np.any(fault):
            shape = np.broadcast_shapes(np.shape(fault), *(np.shape(x) for x in self.env.values()))
            lane = tuple(np.argwhere(np.broadcast_to(fault, shape))[0])
            at = [
                int(np.broadcast_to(np.asarray(_index(e, self.env)), shape)[lane]) for e in g.source.indices
            ]
            value = int(np.broadcast_to(values, shape)[lane])
            raise gather_error(self.stmt, r, k, g, extent, element=tuple(at), value=value, **self.ex.ctx)
        return np.where(outside, 0, values)  # lanes that do not read it: any element

    def where_computed(self, flags):
        """``flags`` kept only on the lanes where C computes this expression: the active
        lanes, and within a select or an ``and``/``or``, the chosen operand's."""
        if self.lanes.mask is not None:
            flags = flags & self.lanes.mask
        if self.chosen is not None:
            flags = flags & self.chosen
        return flags

    def c_divide(self, a, b):
        """Integer division truncating toward zero, as in C."""
        return _truncating_divide(a, self.nonzero(b))

    def floored_mod(self, a, b):
        """Integer ``%`` with the sign of the divisor (NumPy's mod; pm_imod in C)."""
        return np.mod(a, self.nonzero(b)).astype(a.dtype)

    def nonzero(self, b):
        """``b`` where an integer division or modulo by it is computed (a zero there is the
        data's fault, raised: a modulo by zero is a division by zero, and the emitted code
        reports both alike), any nonzero value elsewhere."""
        zero = self.where_computed(b == 0)
        if np.any(zero):
            raise ArgumentError(
                f"statement {self.stmt.name} ({self.stmt}): {_dtype(b.dtype).value} division by zero at run time",
                loc=self.stmt.loc,
                **self.ex.ctx,
            )
        return np.where(b == 0, 1, b).astype(b.dtype)  # masked-off lanes: any nonzero divisor


def _accumulation(loop: Loop) -> Assign | None:
    """The statement of a seq loop that only updates one element per lane, the same in every
    iteration: one ``+= -= *= max= min=`` whose target indices do not mention the loop and
    whose value does not read the buffer it writes. None for any other loop."""
    if len(loop.body) != 1 or not isinstance(loop.body[0], Assign):
        return None
    stmt = loop.body[0]
    if stmt.guard is not None or stmt.predicate is not None or stmt.is_atomic:
        return None
    if not stmt.op.is_update or any(loop.index in index_vars(e) for e in stmt.indices):
        return None
    if any(r.buffer == stmt.buffer for r in reads_of(stmt.value)):
        return None
    return stmt


def to_dtype(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``value`` (computed, of i32, i64, f32 or f64) converted for a store into a buffer of
    ``dtype``, as the emitted code converts it (``cuda_templates/polymap_helpers.cuh``):

    * a float to an integer truncates toward zero, saturates at the type's range and maps
      NaN to 0 (NumPy's own cast leaves out-of-range values to the platform);
    * an integer to a narrower integer wraps (keeps the low bits, as NumPy and C do);
    * anything to bool: nonzero (NaN included) is 1;
    * to f16 or bf16: through f32 (an f64 value is rounded to f32 first), then rounded to
      nearest even."""
    dtype = np.dtype(dtype)
    target = _dtype(dtype)
    if target is DType.BOOL:
        return np.asarray(value != 0)
    if target in (DType.F16, DType.BF16):
        return value.astype(_F32).astype(dtype)
    if target.is_integer and value.dtype.kind == "f":
        info = np.iinfo(dtype)
        wide = np.trunc(np.nan_to_num(value.astype(np.float64), nan=0.0))
        # beyond the range: the limit (2**63 - 1 is no float64, so compare with max + 1)
        over, under = wide >= float(info.max) + 1, wide < float(info.min)
        inside = np.where(over | under, 0, wide).astype(dtype)
        return np.where(over, info.max, np.where(under, info.min, inside)).astype(dtype)
    return value.astype(dtype, copy=False)
