"""A program read as a chain of einsums: what the fusion planner plans.

An einsum here is one statement of the program (with the ``= 0`` that starts its
accumulation, when the program writes one just before it) whose accesses each index one
buffer dimension with one loop index, in a rectangular nest of constant extents. Its loops
are its *dims*: an output dim indexes the target, a reduction dim does not. Each access is
a *tensor use*: the buffer and, per buffer dimension, the dim that indexes it.

A *link* is an intermediate buffer that one einsum writes and the next one reads. It is
what fusion may keep on chip: its producer's output dims line up with the consumer's dims
position by position, which is how a loop over "the same rank" is recognized in both.

Anything outside this class gets a :class:`PlanError` naming the statement and saying why;
the program still maps kernel by kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polymap.errors import PlanError
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferKind,
    Const,
    Gather,
    IBin,
    IConst,
    IndexOp,
    INeg,
    IVar,
    Neg,
    Program,
    Read,
)
from polymap.ir.walk import StatementContext, local_buffers, statements


@dataclass(frozen=True, slots=True)
class Dim:
    """A loop of an einsum: ``name`` (its index), ``size`` (its constant extent)."""

    name: str
    size: int
    reduction: bool  # the target does not index it


@dataclass(frozen=True, slots=True)
class TensorUse:
    """One buffer as one einsum touches it: ``dims[k]`` indexes the buffer's k-th dimension."""

    buffer: str
    dims: tuple[str, ...]
    is_output: bool
    itemsize: int  # bytes per element
    elements: int  # the elements this einsum touches (the product of its dims' sizes)
    text: str  # the access as written, e.g. "W1[d, f]"

    @property
    def label(self) -> str:
        """The access as written (two reads of one buffer differ by their indices)."""
        return self.text + (" (out)" if self.is_output else "")


@dataclass(frozen=True, slots=True)
class Einsum:
    """One statement of the chain (``statements`` also holds the ``= 0`` absorbed into it)."""

    name: str  # the main statement's name, e.g. "S1"
    statements: tuple[str, ...]
    dims: tuple[Dim, ...]
    tensors: tuple[TensorUse, ...]  # the reads, in order of appearance, then the output
    reads_initial_output: bool  # an update of an inout buffer with no `= 0`: its old value is read
    text: str  # the main statement as written
    loc: object = None

    @property
    def output(self) -> TensorUse:
        return self.tensors[-1]

    def dim(self, name: str) -> Dim:
        return next(d for d in self.dims if d.name == name)

    @property
    def iterations(self) -> int:
        return math.prod(d.size for d in self.dims)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.output.buffer})"


@dataclass(frozen=True, slots=True)
class Link:
    """``buffer``, written by einsum ``producer`` and read by einsum ``producer + 1`` and by
    no other: fusion may keep it on chip. ``dim_pairs`` pairs the producer's output dim with
    the consumer's dim, buffer position by position."""

    buffer: str
    producer: int
    dim_pairs: tuple[tuple[str, str], ...]

    @property
    def consumer(self) -> int:
        return self.producer + 1


@dataclass(frozen=True, slots=True)
class Chain:
    """The einsums of a program in textual order, and the links fusion may use.

    ``conflicts`` holds (j, k, why) for einsums j < k that may not share a fused loop."""

    program: str
    einsums: tuple[Einsum, ...]
    links: tuple[Link | None, ...]  # links[k] joins einsum k to k + 1, None where none
    conflicts: tuple[tuple[int, int, str], ...]

    def link_index(self, einsum: int, tensor: int) -> int | None:
        """The link a tensor use belongs to (as its producer's output or its consumer's read
        of the intermediate), or None."""
        use = self.einsums[einsum].tensors[tensor]
        k = einsum if use.is_output else einsum - 1
        if 0 <= k < len(self.links) and self.links[k] is not None and self.links[k].buffer == use.buffer:
            return k
        return None


def read_chain(program: Program) -> Chain:
    """The einsum chain of ``program`` (sizes bound to numbers; defaults are used).

    PlanError naming the statement (and its place in the text) when the program is not a
    chain of einsums."""
    program = _bound(program)
    where = program.error_context()
    for name, local in local_buffers(program).items():
        raise PlanError(
            f"the fusion planner does not apply to '{program.name}': block-local buffer '{name}' "
            "(the planner reads programs whose buffers are all declared at the top)",
            loc=local.decl.loc,
            **where,
        )
    contexts = list(statements(program))
    if not contexts:
        raise PlanError(
            f"the fusion planner does not apply to '{program.name}': it has no statements", **where
        )
    einsums: list[Einsum] = []
    pending_init: StatementContext | None = None
    for ctx in contexts:
        stmt = ctx.stmt
        if not isinstance(stmt, Assign):
            raise PlanError(
                f"the fusion planner does not apply: statement {stmt.name} is an anchor, not an einsum",
                loc=stmt.loc,
                **where,
            )
        if _is_constant_init(ctx):
            if pending_init is not None:
                einsums.append(_einsum(program, pending_init, None, einsums))
            pending_init = ctx
            continue
        if pending_init is not None:
            init_stmt = pending_init.stmt
            if (
                stmt.op.is_update
                and init_stmt.buffer == stmt.buffer
                and init_stmt.indices == stmt.indices
                and _output_loops(pending_init) == _output_loops(ctx, of=stmt)
            ):
                einsums.append(_einsum(program, ctx, pending_init, einsums))
                pending_init = None
                continue
            einsums.append(_einsum(program, pending_init, None, einsums))
            pending_init = None
        einsums.append(_einsum(program, ctx, None, einsums))
    if pending_init is not None:
        einsums.append(_einsum(program, pending_init, None, einsums))
    links = _links(program, einsums)
    return Chain(program.name, tuple(einsums), links, _conflicts(einsums, links))


def _bound(program: Program) -> Program:
    program = program.bind_defaults()
    if program.params:
        names = ", ".join(p.name for p in program.params)
        raise PlanError(
            f"the fusion planner needs every size as a number: bind {names} (Program.bind, or --size)",
            **program.error_context(),
        )
    return program


def _is_constant_init(ctx: StatementContext) -> bool:
    """``T[...] = c`` for a constant c (``0``, ``-inf``): the start of an accumulation."""
    stmt = ctx.stmt
    value = stmt.value if isinstance(stmt, Assign) else None
    if isinstance(value, Neg):
        value = value.operand
    return (
        isinstance(stmt, Assign)
        and stmt.op is AssignOp.SET
        and isinstance(value, Const)
        and stmt.guard is None
        and stmt.predicate is None
    )


def _output_loops(ctx: StatementContext, of: Assign | None = None) -> tuple[tuple[str, object], ...]:
    """The (index, extent) of the loops that index the target: an init and its update must
    agree on them to be one einsum."""
    stmt = of or ctx.stmt
    used = {i.name for i in stmt.indices if isinstance(i, IVar)}
    return tuple((loop.index, loop.extent) for loop in ctx.loops if loop.index in used)


def _einsum(
    program: Program, ctx: StatementContext, init: StatementContext | None, earlier: list[Einsum]
) -> Einsum:
    stmt = ctx.stmt
    assert isinstance(stmt, Assign)
    where = program.error_context()

    def refuse(why: str) -> PlanError:
        return PlanError(
            f"the fusion planner does not apply: statement {stmt.name} `{stmt}` {why}", loc=stmt.loc, **where
        )

    if stmt.guard is not None or stmt.predicate is not None:
        raise refuse("runs under a condition (an einsum runs on its whole rectangular domain)")
    dims: list[Dim] = []
    target_names = {i.name for i in stmt.indices if isinstance(i, IVar)}
    for loop in ctx.loops:
        if not isinstance(loop.extent, IConst):
            raise refuse(f"sits in loop '{loop.index}' whose extent {loop.extent} is not a constant")
        if loop.extent.value < 1:
            raise refuse(f"sits in loop '{loop.index}' of extent {loop.extent.value} (empty)")
        dims.append(Dim(loop.index, loop.extent.value, loop.index not in target_names))
    sizes = {d.name: d.size for d in dims}
    tensors: list[TensorUse] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    reads = [r for r in stmt.reads() if not (stmt.op.is_update and r == stmt.target)]
    for access, is_output in [(r, False) for r in reads] + [(stmt.target, True)]:
        use = _tensor_use(program, access, is_output, sizes, refuse)
        key = (use.buffer, use.dims, is_output)
        if key not in seen:
            seen.add(key)
            tensors.append(use)
    reductions = [d.name for d in dims if d.reduction]
    if reductions and stmt.op is AssignOp.SET:
        raise refuse(
            f"assigns with '=' inside loop {', '.join(repr(r) for r in reductions)} that its target does not "
            "index: only the last value would be kept, which is not an einsum"
        )
    decl = program.buffer(stmt.buffer)
    if stmt.op.is_update and init is None and any(e.output.buffer == stmt.buffer for e in earlier):
        raise refuse(
            f"updates {stmt.buffer}, which an earlier statement writes: the planner reads one einsum per "
            f"result (write an element-wise update as `{stmt.target} = {stmt.target} ... `, or merge the "
            "reductions into one statement)"
        )
    if stmt.op.is_update and init is None and decl.kind is BufferKind.NEW:
        zero = ", ".join(str(i) for i in stmt.indices)
        raise refuse(
            f"updates temporary {stmt.buffer} that nothing starts (its first value is undefined): write "
            f"`{stmt.buffer}[{zero}] = 0` just before it"
        )
    reads_initial = stmt.op.is_update and init is None and decl.kind is BufferKind.INOUT
    names = ((init.stmt.name,) if init is not None else ()) + (stmt.name,)
    return Einsum(stmt.name, names, tuple(dims), tuple(tensors), reads_initial, str(stmt), stmt.loc)


def _why_not_one_index(index) -> str:
    """Why an access's index is not one loop index, in the words of what it is."""
    if isinstance(index, Gather):
        return "a gathered index (read from a buffer) has no tile the planner can count"
    if isinstance(index, IConst):
        return "a constant index is not an einsum's one-index-per-dimension access"
    if isinstance(index, IVar):
        return f"'{index.name}' is not a loop of the statement"
    if any(isinstance(e, IBin) and e.op in (IndexOp.FLOORDIV, IndexOp.MOD) for e in _index_terms(index)):
        return "quasi-affine indices (with // or %) such as p // N are not an einsum's one-index-per-dimension access"
    return "affine combinations such as i + k are not an einsum's one-index-per-dimension access"


def _index_terms(index):
    """``index`` and every sub-expression of it."""
    yield index
    if isinstance(index, IBin):
        yield from _index_terms(index.lhs)
        yield from _index_terms(index.rhs)
    elif isinstance(index, INeg):
        yield from _index_terms(index.operand)


def _tensor_use(program: Program, access: Read, is_output: bool, sizes: dict[str, int], refuse) -> TensorUse:
    names: list[str] = []
    for index in access.indices:
        if not isinstance(index, IVar) or index.name not in sizes:
            why = _why_not_one_index(index)
            raise refuse(
                f"indexes {access.buffer} with `{index}`: the planner needs each index to be one loop index ({why})"
            )
        if index.name in names:
            raise refuse(
                f"indexes {access.buffer} twice with '{index.name}' (a diagonal is not an einsum access)"
            )
        names.append(index.name)
    decl = program.buffer(access.buffer)
    elements = math.prod(sizes[n] for n in names)
    return TensorUse(access.buffer, tuple(names), is_output, decl.dtype.itemsize, elements, str(access))


def _links(program: Program, einsums: list[Einsum]) -> tuple[Link | None, ...]:
    """The link between each pair of neighbouring einsums, or None."""
    links: list[Link | None] = []
    for k in range(len(einsums) - 1):
        out, consumer = einsums[k].output, einsums[k + 1]
        reads = [t for t in consumer.tensors if not t.is_output and t.buffer == out.buffer]
        read_later = any(
            any(t.buffer == out.buffer and not t.is_output for t in e.tensors)
            or (e.reads_initial_output and e.output.buffer == out.buffer)
            for e in einsums[k + 2 :]
        )
        # an `out` buffer may stay on chip only when the consumer writes it back in place
        rewritten = (
            bool(reads) and consumer.output.buffer == out.buffer and consumer.output.dims == reads[0].dims
        )
        kind = program.buffer(out.buffer).kind
        # an update of an inout buffer's old value starts from DRAM: that one stays a DRAM tensor
        starts_from_dram = einsums[k].reads_initial_output
        # the consumer must read the very elements the producer writes, dim by dim
        same_extents = bool(reads) and all(
            einsums[k].dim(p).size == consumer.dim(c).size
            for p, c in zip(out.dims, reads[0].dims, strict=True)
        )
        if (
            len(reads) == 1
            and same_extents
            and not read_later
            and not starts_from_dram
            and (kind is BufferKind.NEW or rewritten)
        ):
            links.append(Link(out.buffer, k, tuple(zip(out.dims, reads[0].dims, strict=True))))
        else:
            links.append(None)
    return tuple(links)


def _conflicts(einsums: list[Einsum], links: tuple[Link | None, ...]) -> tuple[tuple[int, int, str], ...]:
    """Pairs of einsums that may not share a fused loop, and why.

    Within a fused loop each einsum runs on one tile of the loop at a time, so the only
    dependence allowed between fused einsums is a link: the consumer reads exactly the tile
    of the intermediate its producer has just written. Any other buffer that one of two
    einsums writes and the other touches would be read before it is complete, or
    overwritten while still needed."""
    found = []
    for j, first in enumerate(einsums):
        for k in range(j + 1, len(einsums)):
            second = einsums[k]
            link = links[j] if k == j + 1 else None
            for a in first.tensors:
                for b in second.tensors:
                    if a.buffer != b.buffer or not (a.is_output or b.is_output):
                        continue
                    if link is not None and a.buffer == link.buffer:
                        continue
                    verb = "writes" if a.is_output else "reads"
                    found.append((j, k, f"{first.name} {verb} {a.buffer}, which {second.name} also touches"))
                    break
                else:
                    continue
                break
    return tuple(found)
