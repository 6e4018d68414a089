"""Which loops of a kernel's thread body the lanes of a warp may run together.

A kernel with ``lanes = warp`` (``space.KernelMapping``) gives each point of its band a whole
warp: lane 0 runs the thread body, and each *spread* loop of the body runs over all lanes,
iteration ``j`` on lane ``j mod lanes``, between a fork and a join (``space.SpreadLoop``).
That is how a row reduction (gemv's ``y_acc += A[i, j] * x[j]``, softmax's row maximum and
row sum) reads its row with every lane of a warp, coalesced, instead of one thread walking
it alone.

A top-level loop ``L`` of the thread body is spread when running its iterations in any
interleaving over the lanes, with the joins and forks around it, computes what the loop
computes in order:

* **no dependence between two iterations of L** (of one band point), found by isl from the
  program's dependences, except those of its *accumulators*;
* an *accumulator* is a 0-d block-local buffer declared outside L whose every access in L
  is an update ``acc op= e`` by one operator ``op`` in ``+= *= max= min=`` (``e`` not
  reading it), of a compute type (``f32 f64 i32 i64``: the shuffles move it as it is), and
  for an integer one an integer value (no float converted on each update). The
  lanes' partial results are combined at the join. ``max=``/``min=`` and integer ``+=``/``*=``
  are exact in any order (integers wrap); a float ``+=``/``*=`` changes the order of the
  sum, allowed only with ``reassociate`` (the default, stated in the report and the
  emitted header);
* every other block-local buffer L writes is declared inside L (a fresh copy per
  iteration, so per lane); the 0-d locals L only reads are *broadcast* from lane 0 at the
  fork; a local of another shape read by L keeps L in one thread.

The band has at most two loops (threadIdx.x holds the lanes; the band takes y and z).
"""

from __future__ import annotations

import islpy as isl

from polymap.ir.nodes import (
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    Const,
    DType,
    IndexValue,
    Loop,
    Neg,
    New,
    Read,
    Select,
    operand_reads,
)
from polymap.ir.value_types import promote, statement_type
from polymap.ir.walk import declared_locals, walk_block
from polymap.mapping.space import Kernel, SpreadLoop
from polymap.poly.model import PolyModel, StatementModel

COMBINABLE = (AssignOp.ADD, AssignOp.MUL, AssignOp.MAX, AssignOp.MIN)
EXACT_IN_ANY_ORDER = (AssignOp.MAX, AssignOp.MIN)
SHUFFLED_TYPES = (DType.F32, DType.F64, DType.I32, DType.I64)
MAX_BAND_WITH_LANES = 2  # threadIdx.x holds the lanes


def spread_loops(kernel: Kernel, model: PolyModel, *, reassociate: bool = True) -> tuple[SpreadLoop, ...]:
    """The loops of the kernel's thread body that its lanes may run together (see the
    module docstring); empty where the kernel cannot have lanes."""
    if kernel.is_serial or len(kernel.band) > MAX_BAND_WITH_LANES:
        return ()
    outer = len(kernel.host_loops) + len(kernel.band)
    mine = [s for s in model.statements if s.loops[:outer] == kernel.host_loops + kernel.band]
    body_locals = {d.name: d for d in declared_locals(kernel.body)}
    found = []
    for position, stmt in enumerate(kernel.body):
        if not isinstance(stmt, Loop):
            continue
        inside = [s for s in mine if len(s.loops) > outer and s.ctx.position[outer] == position]
        spread = _spread(model, body_locals, position, stmt, inside, outer, reassociate)
        if spread is not None:
            found.append(spread)
    return tuple(found)


def _spread(
    model: PolyModel,
    body_locals: dict[str, BufferDecl],
    position: int,
    loop: Loop,
    inside: list[StatementModel],
    outer: int,
    reassociate: bool,
) -> SpreadLoop | None:
    """The loop at ``position`` of the thread body as a spread loop, if it is one;
    ``body_locals``: the body's block-local buffers by name, ``inside``: its statements."""
    if not inside:
        return None
    own = {s.decl.name for s in walk_block(loop.body) if isinstance(s, New)}
    accumulators: dict[str, AssignOp] = {}
    written = {s.stmt.buffer for s in inside if isinstance(s.stmt, Assign)}
    for name in sorted(written):
        if name in own or name not in body_locals:
            continue  # a fresh copy per iteration, or a global buffer: the dependences decide
        op = _accumulated(name, inside, body_locals[name], lambda b: model.program.buffer(b).dtype)
        if op is None:
            return None  # a local of the body L writes that no combine can merge
        accumulators[name] = op
    reassociates = any(
        op not in EXACT_IN_ANY_ORDER and body_locals[name].dtype.is_float for name, op in accumulators.items()
    )
    if reassociates and not reassociate:
        return None
    broadcasts = []
    for s in inside:
        for read in s.stmt.reads():
            name = read.buffer
            if name in own or name not in body_locals or name in accumulators or name in broadcasts:
                continue
            if body_locals[name].shape:
                return None  # lane 0's copy of an array is not broadcast
            broadcasts.append(name)
    if not _no_carried_dependence(model, inside, outer, set(accumulators)):
        return None
    return SpreadLoop(
        position,
        loop.index,
        tuple(s.name for s in inside),
        tuple(accumulators.items()),
        tuple(broadcasts),
        reassociates,
    )


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
    order: the statement computes in an integer type (every buffer it reads, a select's
    condition too, is an integer: ``statement_type``) and its value is an integer; for
    ``max=``/``min=`` that type is no wider than the accumulator's (a value wider than it,
    truncated on each update, makes the order matter; ``+=`` and ``*=`` wrap alike)."""
    computes = statement_type(stmt, dtype_of)
    if not computes.is_integer or not _integer_valued(stmt.value, dtype_of):
        return False
    return stmt.op not in EXACT_IN_ANY_ORDER or promote(dtype, computes) is dtype.compute


def _accumulated(name: str, inside: list[StatementModel], decl, dtype_of) -> AssignOp | None:
    """The operator of an accumulator: every access of ``name`` in the loop is an update by
    that one operator whose value does not read it; None if it is no accumulator."""
    if decl.shape or decl.dtype not in SHUFFLED_TYPES:
        return None
    ops = set()
    for s in inside:
        stmt = s.stmt
        reads_it = any(r.buffer == name for r in operand_reads(stmt))
        if isinstance(stmt, Assign) and stmt.buffer == name:
            if stmt.op not in COMBINABLE or reads_it:
                return None
            if decl.dtype.is_integer and not _exact_integer_update(stmt, decl.dtype, dtype_of):
                return None
            ops.add(stmt.op)
        elif reads_it:
            return None
    return ops.pop() if len(ops) == 1 else None


def _no_carried_dependence(
    model: PolyModel, inside: list[StatementModel], outer: int, accumulators: set[str]
) -> bool:
    """Whether no dependence joins two iterations of the loop at one band point, except on
    the accumulators (isl: the dependence relation restricted to equal host and band
    indices and different indices of the loop is empty)."""
    names = {s.name for s in inside}
    for dep in model.dependences.items:
        if dep.source not in names or dep.sink not in names or dep.buffer in accumulators:
            continue
        pairs = dep.relation
        for d in range(outer):
            pairs = pairs.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
        same = pairs.equate(isl.dim_type.in_, outer, isl.dim_type.out, outer)
        if not pairs.subtract(same).is_empty():
            return False
    return True
