"""A plan as a program: the tiled and fused loop tree written out in the TE language.

Each segment becomes one top-level nest: its band loops (``par``), the tiles of its tiled
intermediates declared inside them (block-local: one per band tile), then each einsum's
loops in the plan's order. At each blocking level the tensor's tile is a block-local
buffer: an input is copied in from its buffer there, an output is started there (its
``= 0``, or a copy of its old value for an ``inout`` without one) and copied out after
the loops inside the level. A held input is copied once, before the segment, into a
program-wide buffer. The statements compute on the tiles.

So the off-chip traffic of the plan is the number of instances of the copy statements,
which isl counts on this program; and the program runs on the reference executor, where
it must give the original program's outputs bit for bit: every reduction still visits its
terms in the original order (a dim's loops are nested outer to inner with decreasing
strides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from polymap.errors import InternalError
from polymap.ir.nodes import (
    Anchor,
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    Const,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IVar,
    Loop,
    LoopKind,
    New,
    Program,
    Read,
    Stmt,
    map_values,
    operand_reads,
)
from polymap.ir.walk import loops as program_loops
from polymap.ir.walk import statements, walk_block
from polymap.plan.chain import Einsum, TensorUse
from polymap.plan.planner import Plan
from polymap.plan.tree import Level, LinkMode, link_mode_of
from polymap.plan.tree import Loop as PlanLoop

COPY = "copy"  # a copy statement's name until the statements are numbered
TILE_SUFFIX = "_tile"
BAND_SUFFIX = "_band"
HELD_SUFFIX = "_held"


@dataclass(frozen=True, slots=True)
class CopyStatement:
    """A copy the planned program makes: ``statement`` (its name in the planned program)
    moves elements of ``buffer`` for tensor ``tensor`` of einsum ``einsum`` (indices into
    the plan's chain); ``direction`` is "in" or "out"."""

    statement: str
    einsum: int
    tensor: int
    buffer: str
    direction: str


@dataclass(frozen=True, slots=True)
class PlannedProgram:
    program: Program
    copies: tuple[CopyStatement, ...]


class _Names:
    def __init__(self, program: Program) -> None:
        self.taken = {b.name for b in program.all_buffers()} | set(program.param_names)
        self.taken |= {loop.index for loop, _ in program_loops(program)} | {n for n, _ in program.bindings}

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}{k}"
        self.taken.add(name)
        return name


def _add(terms: list[IndexExpr]) -> IndexExpr:
    terms = [t for t in terms if t != IConst(0)]
    if not terms:
        return IConst(0)
    expr = terms[0]
    for t in terms[1:]:
        expr = IBin(IndexOp.ADD, expr, t)
    return expr


def _scaled(var: str, stride: int) -> IndexExpr:
    return IVar(var) if stride == 1 else IBin(IndexOp.MUL, IVar(var), IConst(stride))


class _Writer:
    """Writes the planned program's statements; remembers which are copies (by a marker
    name, replaced by the parsed program's statement names at the end)."""

    def __init__(self, program: Program, plan: Plan) -> None:
        self.program = program
        self.plan = plan
        self.names = _Names(program)
        self.buffers: list[BufferDecl] = list(program.buffers)
        self.tiled: set[str] = set()  # the intermediates a band tile stands for in their segment
        self.copies: list[
            tuple[int, int, str, str]
        ] = []  # (einsum, tensor, buffer, direction), in text order
        self.assigns = {ctx.stmt.name: ctx.stmt for ctx in statements(program)}

    # -------------------------------------------------------------- the whole program

    def body(self) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for group in self.plan.segments:
            out += self._segment(group)
        return tuple(out)

    def _segment(self, group: tuple[int, ...]) -> list[Stmt]:
        chain, nests = self.plan.chain, self.plan.nests
        prologue: list[Stmt] = []
        # held inputs: copied once, before the band, into program-wide buffers
        held: dict[tuple[int, int], str] = {}
        for e in group:
            for t in nests[e].held:
                use = chain.einsums[e].tensors[t]
                name = self.names.fresh(use.buffer + HELD_SUFFIX)
                sizes = [chain.einsums[e].dim(d).size for d in use.dims]
                self.buffers.append(
                    BufferDecl(
                        name, BufferKind.NEW, self.program.buffer(use.buffer).dtype, tuple(map(IConst, sizes))
                    )
                )
                held[e, t] = name
                prologue += self._copy_nest(
                    e, t, name, [IConst(0)] * len(sizes), sizes, "in", whole_buffer=use.buffer
                )
        nest = self._band(group, lambda e, bands, tiles: self._einsum(e, bands, tiles, held))
        return prologue + nest

    def gpu_segment(self, group: tuple[int, ...]) -> list[Stmt]:
        """A fused segment as the thread mapper takes it: the band loops and the band tiles of
        its intermediates as in :meth:`_segment`, and in them each einsum as the program
        writes it, over its share of the band tile (:meth:`_phase`: its output points one
        ``par`` loop, each with the output's start, around its reduction dims ``seq`` in the
        einsum's order, so every sum keeps its order). Only the intermediates are tiles;
        every other tensor is read and written in its own buffer, which the mapper stages in
        tiles of its own choosing."""
        return self._band(group, self._phase)

    def _band(self, group: tuple[int, ...], write) -> list[Stmt]:
        """The segment's band loops around the band tiles of its tiled intermediates and
        ``write(e, bands, tiles)`` of each einsum ``e``."""
        chain, nests = self.plan.chain, self.plan.nests
        # band loops: one index per fused rank, shared by the einsums of the segment
        band_vars: list[dict[str, str]] = []
        for e in group:
            if not band_vars:
                band_vars.append(
                    {loop.dim: self.names.fresh(loop.dim + BAND_SUFFIX) for loop in nests[e].band}
                )
                continue
            pairs = dict(chain.links[e - 1].dim_pairs)
            before = band_vars[-1]
            mine = {c: before[p] for p, c in pairs.items() if p in before}
            if set(mine) != {loop.dim for loop in nests[e].band}:
                raise InternalError(
                    f"the band of {chain.einsums[e].name} does not line up with its producer's"
                )
            band_vars.append(mine)
        inner: list[Stmt] = []
        tiles: dict[int, str] = {}  # link index -> the band tile of a tiled intermediate
        for e in group[:-1]:
            link = chain.links[e]
            use = chain.einsums[e].output
            name = self.names.fresh(use.buffer + BAND_SUFFIX)
            shape = [self._local_size(e, d) for d in use.dims]
            inner.append(
                New(
                    BufferDecl(
                        name, BufferKind.NEW, self.program.buffer(use.buffer).dtype, tuple(map(IConst, shape))
                    )
                )
            )
            tiles[link.producer] = name
            self.tiled.add(use.buffer)
        for e, bands in zip(group, band_vars, strict=True):
            inner += write(e, bands, tiles)
        nest: list[Stmt] = inner
        first = nests[group[0]]
        for loop in reversed(first.band):
            nest = [Loop(LoopKind.PAR, band_vars[0][loop.dim], IConst(loop.factor), tuple(nest))]
        return nest

    def _local_size(self, e: int, dim: str) -> int:
        band = {loop.dim: loop.factor for loop in self.plan.nests[e].band}
        return self.plan.chain.einsums[e].dim(dim).size // band.get(dim, 1)

    def _phase(self, e: int, bands: dict[str, str], tiles: dict[int, str]) -> list[Stmt]:
        """Einsum ``e`` as written, over its share of the band tile (:meth:`gpu_segment`).
        Its output dims are one ``par`` loop over the share, each dim's index its place in
        the share (row-major: ``p // 32``, ``p % 32``): a block's lanes take the loop, so
        every lane gets points of the whole share (lanes spread one loop of a body, and the
        share's rows alone are too few for a block)."""
        einsum = self.plan.chain.einsums[e]
        outputs = [d for d in einsum.dims if not d.reduction]
        extents = [self._local_size(e, d.name) for d in outputs]
        point = self.names.fresh("p" if len(outputs) > 1 else outputs[0].name) if outputs else None
        local: dict[str, IndexExpr] = {}
        for k, dim in enumerate(outputs):
            stride = math.prod(extents[k + 1 :])
            value: IndexExpr = IVar(point)
            if stride > 1:
                value = IBin(IndexOp.FLOORDIV, value, IConst(stride))
            if k > 0:
                value = IBin(IndexOp.MOD, value, IConst(extents[k]))
            local[dim.name] = value
        for dim in einsum.dims:
            if dim.reduction:
                local[dim.name] = IVar(self.names.fresh(dim.name))

        def index(dim: str, on_tile: bool) -> IndexExpr:
            if on_tile or dim not in bands:
                return local[dim]
            return _add([_scaled(bands[dim], self._local_size(e, dim)), local[dim]])

        places: dict[int, tuple[str, list[IndexExpr]]] = {}
        for t, use in enumerate(einsum.tensors):
            tiled = link_mode_of(self.plan.chain, self.plan.modes, e, t) is LinkMode.TILED
            buffer = tiles[e if use.is_output else e - 1] if tiled else use.buffer
            places[t] = (buffer, [index(d, tiled) for d in use.dims])
        body: list[Stmt] = self._compute(einsum, places)
        for dim in reversed([d for d in einsum.dims if d.reduction]):
            body = [Loop(LoopKind.SEQ, local[dim.name].name, IConst(dim.size), tuple(body))]
        # the output's start: the absorbed ``= 0``, or a tile's zeros (a buffer of the program
        # that starts as zeros and is only updated needs none, as written)
        start = self._init_value(einsum)
        out_tiled = link_mode_of(self.plan.chain, self.plan.modes, e, len(einsum.tensors) - 1)
        if start is not None and (len(einsum.statements) > 1 or out_tiled is LinkMode.TILED):
            buffer, indices = places[len(einsum.tensors) - 1]
            body = [Assign("S", buffer, tuple(indices), AssignOp.SET, start), *body]
        if point is not None:
            body = [Loop(LoopKind.PAR, point, IConst(math.prod(extents)), tuple(body))]
        return body

    # ---------------------------------------------------------------- one einsum

    def _einsum(self, e: int, bands: dict[str, str], tiles: dict[int, str], held) -> list[Stmt]:
        einsum, nest = self.plan.chain.einsums[e], self.plan.nests[e]
        items = nest.items
        # one index per loop of the nest, and its stride within its dim
        loop_vars: list[str | None] = []
        strides: list[int] = []
        for k, item in enumerate(items):
            if isinstance(item, PlanLoop):
                loop_vars.append(self.names.fresh(f"{item.dim}_{k}"))
                strides.append(
                    math.prod(
                        i.factor for i in items[k + 1 :] if isinstance(i, PlanLoop) and i.dim == item.dim
                    )
                )
            else:
                loop_vars.append(None)
                strides.append(0)

        def part(dim: str, lo: int, hi: int) -> list[IndexExpr]:
            """The terms of dim's index from the loops at positions lo..hi-1."""
            return [
                _scaled(loop_vars[k], strides[k])
                for k in range(lo, hi)
                if isinstance(items[k], PlanLoop) and items[k].dim == dim
            ]

        def band_term(dim: str) -> list[IndexExpr]:
            if dim not in bands:
                return []
            return [_scaled(bands[dim], self._local_size(e, dim))]

        places: dict[int, tuple[str, list[IndexExpr]]] = {}  # tensor -> (buffer, indices) the compute uses

        def local_index(dim: str) -> IndexExpr:
            return _add(part(dim, 0, len(items)))

        def global_index(dim: str) -> IndexExpr:
            return _add(band_term(dim) + part(dim, 0, len(items)))

        for t, use in enumerate(einsum.tensors):
            mode = link_mode_of(self.plan.chain, self.plan.modes, e, t)
            if mode is LinkMode.TILED:
                k = e if use.is_output else e - 1
                places[t] = (tiles[k], [local_index(d) for d in use.dims])
            elif mode is LinkMode.WHOLE:
                places[t] = (use.buffer, [global_index(d) for d in use.dims])
            elif t in nest.held:
                places[t] = (held[e, t], [global_index(d) for d in use.dims])
        levels = {item.tensor: k for k, item in enumerate(items) if isinstance(item, Level)}
        tile_names = {
            t: self.names.fresh(einsum.tensors[t].buffer + TILE_SUFFIX)
            for t in levels
            if link_mode_of(self.plan.chain, self.plan.modes, e, t) in (None, LinkMode.DRAM)
        }
        for t in tile_names:
            use = einsum.tensors[t]
            places[t] = (tile_names[t], [_add(part(d, levels[t] + 1, len(items))) for d in use.dims])

        init_value = self._init_value(einsum)
        compute = self._compute(einsum, places)

        def build(k: int) -> list[Stmt]:
            if k == len(items):
                return compute
            item = items[k]
            if isinstance(item, PlanLoop):
                dim = einsum.dim(item.dim)
                kind = LoopKind.SEQ if dim.reduction else LoopKind.PAR
                return [Loop(kind, loop_vars[k], IConst(item.factor), tuple(build(k + 1)))]
            t, use = item.tensor, einsum.tensors[item.tensor]
            rest = build(k + 1)
            sizes = [
                math.prod(i.factor for i in items[k + 1 :] if isinstance(i, PlanLoop) and i.dim == d)
                for d in use.dims
            ]
            offsets = [_add(band_term(d) + part(d, 0, k)) for d in use.dims]
            mode = link_mode_of(self.plan.chain, self.plan.modes, e, t)
            if mode is LinkMode.TILED:
                if use.is_output and init_value is not None:  # the whole band tile is inside this level
                    return self._fill(tiles[e], sizes, init_value) + rest
                return rest
            name = tile_names[t]
            decl = New(
                BufferDecl(
                    name, BufferKind.NEW, self.program.buffer(use.buffer).dtype, tuple(map(IConst, sizes))
                )
            )
            if not use.is_output:
                return [decl, *self._copy_nest(e, t, name, offsets, sizes, "in")] + rest
            if init_value is not None:
                start = self._fill(name, sizes, init_value)
            elif einsum.reads_initial_output:
                start = self._copy_nest(e, t, name, offsets, sizes, "in")
            else:
                start = []
            return [decl, *start, *rest, *self._copy_nest(e, t, name, offsets, sizes, "out")]

        body = build(0)
        out_mode = link_mode_of(self.plan.chain, self.plan.modes, e, len(einsum.tensors) - 1)
        if out_mode is LinkMode.WHOLE and init_value is not None:
            use = einsum.output
            offsets = [_add(band_term(d)) for d in use.dims]
            sizes = [self._local_size(e, d) for d in use.dims]
            body = self._fill(use.buffer, sizes, init_value, offsets) + body
        return body

    def _init_value(self, einsum: Einsum):
        """What the output's tile starts as: the absorbed ``= 0``'s value, 0 for an update of a
        buffer that starts as zeros, None when nothing needs starting."""
        main = self.assigns[einsum.statements[-1]]
        if len(einsum.statements) > 1:
            return self.assigns[einsum.statements[0]].value
        if main.op.is_update and not einsum.reads_initial_output:
            return Const(0)
        return None

    def _compute(self, einsum: Einsum, places: dict[int, tuple[str, list[IndexExpr]]]) -> list[Stmt]:
        main = self.assigns[einsum.statements[-1]]
        reads = {
            (use.buffer, tuple(IVar(d) for d in use.dims)): places[t]
            for t, use in enumerate(einsum.tensors)
            if not use.is_output
        }

        def leaf(expr):
            if isinstance(expr, Read):
                buffer, indices = reads[expr.buffer, expr.indices]
                return Read(buffer, tuple(indices))
            return expr

        target_buffer, target_indices = places[len(einsum.tensors) - 1]
        return [Assign("S", target_buffer, tuple(target_indices), main.op, map_values(main.value, leaf))]

    def _fill(
        self, buffer: str, sizes: list[int], value, offsets: list[IndexExpr] | None = None
    ) -> list[Stmt]:
        idx = [self.names.fresh(f"z_{k}") for k in range(len(sizes))]
        offsets = offsets or [IConst(0)] * len(sizes)
        target = tuple(_add([o, IVar(v)]) for o, v in zip(offsets, idx, strict=True))
        stmt: Stmt = Assign("S", buffer, target, AssignOp.SET, value)
        for v, size in reversed(list(zip(idx, sizes, strict=True))):
            stmt = Loop(LoopKind.PAR, v, IConst(size), (stmt,))
        return [stmt]

    def _copy_nest(
        self,
        e: int,
        t: int,
        tile: str,
        offsets: list[IndexExpr],
        sizes: list[int],
        direction: str,
        *,
        whole_buffer: str | None = None,
    ) -> list[Stmt]:
        use: TensorUse = self.plan.chain.einsums[e].tensors[t]
        idx = [self.names.fresh(f"c_{k}") for k in range(len(sizes))]
        at_tile = tuple(IVar(v) for v in idx)
        at_buffer = tuple(_add([o, IVar(v)]) for o, v in zip(offsets, idx, strict=True))
        buffer = whole_buffer or use.buffer
        marker = f"{COPY}{len(self.copies)}"  # renamed in text order by _named
        if direction == "in":
            stmt: Stmt = Assign(marker, tile, at_tile, AssignOp.SET, Read(buffer, at_buffer))
        else:
            stmt = Assign(marker, buffer, at_buffer, AssignOp.SET, Read(tile, at_tile))
        self.copies.append((e, t, buffer, direction))
        for v, size in reversed(list(zip(idx, sizes, strict=True))):
            stmt = Loop(LoopKind.PAR, v, IConst(size), (stmt,))
        return [stmt]


def planned_program(program: Program, plan: Plan) -> PlannedProgram:
    """``program`` (sizes bound as the plan had them) rewritten as ``plan`` says, with the
    copy statements it makes."""
    bound = program.bind_defaults()
    writer = _Writer(bound, plan)
    names: dict[str, str] = {}
    parsed = _as_program(bound, writer, writer.body(), names)
    copies = tuple(
        CopyStatement(names[f"{COPY}{k}"], e, t, buffer, direction)
        for k, (e, t, buffer, direction) in enumerate(writer.copies)
    )
    return PlannedProgram(parsed, copies)


def _as_program(
    bound: Program,
    writer: _Writer,
    body: tuple[Stmt, ...],
    names: dict[str, str],
    drop: frozenset[str] = frozenset(),
) -> Program:
    """``body`` as ``bound``'s planned program, its statements named in text order (``names``
    maps each copy's marker to its name), without the temporaries ``drop``, checked to read
    back from its own text (a statement left naming one would not)."""
    from polymap.ir.parse import parse
    from polymap.ir.printer import format_program

    body = _named(body, names, [0])
    # a tile declared outside every loop (a segment without a band) is program-wide
    hoisted = [stmt.decl for stmt in body if isinstance(stmt, New)]
    body = tuple(stmt for stmt in body if not isinstance(stmt, New))
    kept = [d for d in writer.buffers if not (d.kind is BufferKind.NEW and d.name in drop)]
    rewritten = Program(f"{bound.name}_planned", (), tuple(kept + hoisted), body)
    # the text must read back as this very program: what a user sees is what ran
    parsed = parse(format_program(rewritten), name=rewritten.name, source=f"<the plan of {bound.name}>")
    if parsed != rewritten:
        raise InternalError(f"the planned program of {bound.name} does not read back as written")
    return parsed


def program_to_map(program: Program, plan: Plan) -> Program:
    """What ``--fuse`` maps: ``program`` (sizes bound) with each segment of ``plan`` that
    fuses einsums rewritten (``_Writer.gpu_segment``: the plan's band and its intermediates'
    band tiles, each einsum as written over its share of the tile), and every other
    einsum's nest as written.

    An unfused segment's tiles only bound its DRAM traffic under the capacity (they are
    Timeloop's buffers, a k-tile of one element where any size moves the same bytes); the
    thread mapper stages such a nest itself, in tiles sized for the GPU (shared memory,
    vector copies, double buffering), which the plan's copies into block-local arrays would
    take from it. An intermediate kept whole on chip is the program's own buffer in the
    planned program too (the L2 holds it on a GPU). So only a tiled fusion changes the
    program, and only one with a band of more than one tile that the program does not write
    already: a fused segment whose einsums are one top-level nest as written (the GEMM with
    its bias and ReLU) stays so, and so does one whose band is a single tile (its
    intermediates whole, as the program's own buffers are). Where that leaves nothing to
    rewrite, this is ``program`` itself; where a top-level nest of ``program`` holds einsums
    of a fused segment and others, the whole plan is written (:func:`planned_program`)."""
    bound = program.bind_defaults()
    owner = {name: e for e, einsum in enumerate(plan.chain.einsums) for name in einsum.statements}
    segment_of = {e: group for group in plan.segments for e in group}
    writer = _Writer(bound, plan)
    body: list[Stmt] = []
    written: set[tuple[int, ...]] = set()
    as_written: list[Stmt] = []
    nests = [
        (nest, {owner.get(s.name) for s in walk_block((nest,)) if isinstance(s, (Assign, Anchor))})
        for nest in bound.body
    ]
    for nest, inside in nests:
        groups = {segment_of[e] for e in inside if e is not None}
        if all(len(group) == 1 for group in groups):
            body.append(nest)  # no einsum of a fused segment: as written
            as_written.append(nest)
            continue
        if len(groups) != 1 or None in inside:  # a fused segment shares the nest
            return planned_program(program, plan).program
        (group,) = groups
        if inside == set(group) or not plan.nests[group[0]].band:
            # the program writes the segment fused already, in one nest (a GEMM's epilogue
            # on each point's own value, kept in its registers), or the band is one tile
            # (each intermediate whole, as the program's own buffer, in the L2 on a GPU):
            # mapped as written
            body.append(nest)
            as_written.append(nest)
        elif group not in written:  # the segment's band, where its first nest was
            written.add(group)
            body += writer.gpu_segment(group)
    if not written:
        return bound
    # an intermediate of a rewritten segment lives in its band tiles only (the plan keeps
    # it on chip: nothing outside the segment reads it), so no global buffer is allocated,
    # unless a nest kept as written uses it too (an in-place epilogue's buffer, written
    # back by its GEMM before the segment that fuses the epilogue with the next einsum)
    kept = {
        name
        for s in walk_block(tuple(as_written))
        if isinstance(s, (Assign, Anchor))
        for name in (s.buffer, *(r.buffer for r in operand_reads(s)))
    }
    return _as_program(bound, writer, tuple(body), {}, frozenset(writer.tiled) - kept)


def _named(
    stmts: tuple[Stmt, ...] | list[Stmt], names: dict[str, str], counter: list[int]
) -> tuple[Stmt, ...]:
    """``stmts`` with every statement named S0, S1, ... in text order (as the parser names
    them); ``names`` maps each copy's marker to its name."""
    out: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, Assign):
            name = f"S{counter[0]}"
            counter[0] += 1
            if stmt.name.startswith(COPY):
                names[stmt.name] = name
            out.append(replace(stmt, name=name))  # a nest kept as written keeps its guards
        elif isinstance(stmt, Loop):
            out.append(replace(stmt, body=_named(stmt.body, names, counter)))
        else:
            out.append(stmt)
    return tuple(out)


def checked_planned_program(program: Program, plan: Plan) -> PlannedProgram:
    """:func:`planned_program`, with isl's count of its copies checked against the plan's
    traffic, tensor by tensor (InternalError if they differ: the plan would not describe
    the program it became)."""
    planned = planned_program(program, plan)
    counted = counted_traffic(planned)
    claimed = {
        (c.einsum, c.tensor): (c.reads, c.writes) for c in plan.accounting.tensors if c.reads or c.writes
    }
    if counted != claimed:
        raise InternalError(f"isl counts the planned program's copies as {counted}, the plan says {claimed}")
    return planned


def fused_program(program: Program, capacity, **options) -> Program:
    """``program`` planned within ``capacity`` (``polymap.plan.planner.plan``'s options) and
    its fused segments rewritten as the plan says (:func:`program_to_map`): a program to
    map, prove and compile like any other."""
    return fused_plan(program, capacity, **options)[1]


def fused_plan(program: Program, capacity, **options) -> tuple[Plan, Program]:
    """``fused_program`` with the plan that made it."""
    from polymap.plan.planner import plan

    result = plan(program, capacity, **options)
    checked_planned_program(program, result)  # the plan describes the program it writes
    return result, program_to_map(program, result)


def counted_traffic(planned: PlannedProgram) -> dict[tuple[int, int], tuple[int, int]]:
    """(elements read, elements written) per tensor use of the chain, counted by isl as the
    instances of the planned program's copy statements."""
    from polymap.poly.model import analyze

    model = analyze(planned.program)
    counted: dict[tuple[int, int], list[int]] = {}
    for copy in planned.copies:
        n = count_points(model.statement(copy.statement).domain)
        entry = counted.setdefault((copy.einsum, copy.tensor), [0, 0])
        entry[0 if copy.direction == "in" else 1] += n
    return {key: (r, w) for key, (r, w) in counted.items()}


def count_points(domain) -> int:
    """The number of points of an isl set with no parameters. A box (the set equals the box
    of its bounds, which isl checks) is the product of its extents, at any size; any other
    set is counted by isl point by point."""
    import islpy as isl

    n = domain.dim(isl.dim_type.set)
    bounds = [(domain.dim_min_val(d).to_python(), domain.dim_max_val(d).to_python()) for d in range(n)]
    box = isl.Set.universe(domain.get_space())
    for d, (lo, hi) in enumerate(bounds):
        var = isl.Aff.var_on_domain(isl.LocalSpace.from_space(domain.get_space()), isl.dim_type.set, d)
        box = box & var.ge_set(var * 0 + lo) & var.le_set(var * 0 + hi)
    if box.is_equal(domain):
        return math.prod(hi - lo + 1 for lo, hi in bounds) if not domain.is_empty() else 0
    return domain.count_val().to_python()
