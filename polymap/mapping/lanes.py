"""Which loops of a kernel's thread body the lanes of a warp may run together.

A kernel with ``lanes = warp`` (``space.KernelMapping``) gives each point of its band a whole
warp: lane 0 runs the thread body, and each *spread* loop of the body runs over all lanes,
iteration ``j`` on lane ``j mod lanes``, between a fork and a join (``space.SpreadLoop``).
That is how a row reduction (gemv's ``y_acc += A[i, j] * x[j]``, softmax's row maximum and
row sum) reads its row with every lane of a warp, coalesced, instead of one thread walking
it alone.

A loop ``L`` of the thread body is spread when running its iterations in any interleaving
over the lanes, with the joins and forks around it, computes what the loop computes in
order (each run of it: for one band point and one iteration of the loops around it):

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
* an *online sum* (``ir/online_sums.py``: ``top = max(m, x); s = s * exp(m - top) +
  exp(x - top); m = top``, the one-pass softmax's running maximum and sum) is a group of
  accumulators: ``m`` a ``max=``, each ``s`` a float sum that starts at 0 on lanes other
  than 0, and the join combines the lanes' groups, each sum rescaled to the larger maximum
  (``pm_lanes_online``); it reorders a float sum, so it needs ``reassociate``;
* every other 0-d block-local buffer L writes is declared inside L (a fresh copy per
  iteration, so per lane); the 0-d locals L only reads are *broadcast* from lane 0 at the
  fork;
* a block-local *array* declared outside L that L reads or writes is *shared*: the kernel
  keeps one copy of it per band point in shared memory instead of one per thread, every
  lane reads and writes that copy, and the barriers of the forks and joins order the lanes'
  accesses (lane 0 fills a row that a spread loop then reads, a spread loop writes a tile
  that lane 0 or a later spread loop reads). Two iterations of L that touch one element
  (one of them writing) are a dependence L carries, which keeps L in one thread as any other.

A loop of the body that is not spread is run by every lane (lane 0 alone runs the statements
in it outside spread loops), and the loops inside it are searched the same way: a row
reduction inside a sequential iteration loop (a bisection's mass, once per step) is spread,
with a fork and a join at each step of the iteration loop.

The band has at most two loops (threadIdx.x holds the lanes; the band takes y and z).
"""

from __future__ import annotations

from polymap.ir.accumulators import accumulated, reorders
from polymap.ir.nodes import Assign, AssignOp, BufferDecl, Loop, New
from polymap.ir.online_sums import infinite_start, online_sums
from polymap.ir.walk import declared_locals, walk_block
from polymap.mapping.space import Kernel, SpreadLoop
from polymap.poly.model import PolyModel, StatementModel

MAX_BAND_WITH_LANES = 2  # threadIdx.x holds the lanes


def spread_loops(kernel: Kernel, model: PolyModel, *, reassociate: bool = True) -> tuple[SpreadLoop, ...]:
    """The loops of the kernel's thread body that its lanes may run together (see the
    module docstring); empty where the kernel cannot have lanes."""
    if kernel.is_serial or len(kernel.band) > MAX_BAND_WITH_LANES:
        return ()
    outer = len(kernel.host_loops) + len(kernel.band)
    mine = [s for s in model.statements if s.loops[:outer] == kernel.host_loops + kernel.band]
    body_locals = {d.name: d for d in declared_locals(kernel.body)}
    assigns = [s for s in walk_block(kernel.body) if isinstance(s, Assign)]
    found = []

    def visit(block, path: tuple[int, ...]) -> None:
        for position, stmt in enumerate(block):
            if not isinstance(stmt, Loop):
                continue
            here = (*path, position)
            inside = [
                s
                for s in mine
                if len(s.loops) > outer + len(path) and s.ctx.position[outer : outer + len(here)] == here
            ]
            spread = _spread(model, body_locals, assigns, here, stmt, inside, outer, reassociate)
            if spread is not None:
                found.append(spread)
            else:  # every lane runs the loop; a loop inside it may still be spread
                visit(stmt.body, here)

    visit(kernel.body, ())
    return tuple(found)


def _spread(
    model: PolyModel,
    body_locals: dict[str, BufferDecl],
    assigns: list[Assign],
    path: tuple[int, ...],
    loop: Loop,
    inside: list[StatementModel],
    outer: int,
    reassociate: bool,
) -> SpreadLoop | None:
    """The loop at ``path`` of the thread body as a spread loop, if it is one;
    ``body_locals``: the body's block-local buffers by name, ``assigns``: the body's
    assignments, ``inside``: its statements."""
    if not inside:
        return None
    own = {s.decl.name for s in walk_block(loop.body) if isinstance(s, New)}
    dtype_of = model.program.buffer
    outside = {name: decl for name, decl in body_locals.items() if name not in own}
    names = {s.name for s in inside}  # a maximum that may start from -inf: one thread
    online = [
        group
        for group in online_sums(loop.body, outside, lambda b: dtype_of(b).dtype)
        if infinite_start(group.maximum, assigns, names, outside[group.maximum].dtype) is None
    ]
    # an online sum's pair combines as one (ir/online_sums.py): its maximum as a max=, its
    # sum starting at 0 on lanes other than 0 as a +=
    accumulators: dict[str, AssignOp] = {}
    for group in online:
        accumulators[group.maximum] = AssignOp.MAX
        accumulators.update((total, AssignOp.ADD) for total in group.totals)
    shared: list[str] = []  # arrays of the body: one copy per band point, in shared memory
    written = {s.stmt.buffer for s in inside if isinstance(s.stmt, Assign)}
    for name in sorted(written):
        if name in own or name not in body_locals or name in accumulators:
            continue  # a fresh copy per iteration, a global buffer (the dependences decide), an online sum's
        decl = body_locals[name]
        if decl.shape:
            shared.append(name)  # as a global buffer: the dependences decide
            continue
        op = accumulated(name, [s.stmt for s in inside], decl, lambda b: dtype_of(b).dtype)
        if op is None:
            return None  # a 0-d local of the body L writes that no combine can merge
        accumulators[name] = op
    reassociates = any(reorders(op, body_locals[name].dtype) for name, op in accumulators.items())
    if reassociates and not reassociate:
        return None
    broadcasts = []
    for s in inside:
        for read in s.stmt.reads():
            name = read.buffer
            if name in own or name not in body_locals or name in accumulators or name in broadcasts:
                continue
            if body_locals[name].shape:
                if name not in shared:
                    shared.append(name)
                continue
            broadcasts.append(name)
    if not model.dependences.carried_only_on(
        {s.name for s in inside}, outer + len(path) - 1, set(accumulators)
    ):
        return None
    return SpreadLoop(
        path,
        loop.index,
        tuple(s.name for s in inside),
        tuple(accumulators.items()),
        tuple(broadcasts),
        reassociates,
        tuple(sorted(shared)),
        tuple((group.maximum, group.totals) for group in online),
    )
