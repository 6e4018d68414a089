"""The copies, barriers and shared-memory reads of a staged kernel as isl relations, for
``verify`` to prove and ``codegen`` to generate (the schedule is in ``staging.py``).

For a staged buffer ``X`` (tile widths ``W``, box origin ``lo(b, kt)``), with the hardware
point of a copy ``[h, b, t, kt, n]`` (host indices, block, thread, tile, the thread's n-th
element)::

    Copy_X[h, b, kt, o] : 0 <= o < W, lo + o inside X's shape, 0 <= kt < tiles
    run by thread t as its n-th copy when  sum_d o_d * stride_d = n * threads + tid
    (tid = tx + Tx ty + Tx Ty tz, stride_d the row-major strides of the unpadded tile)
    at time [1, kt, 0, r, n, 0..] (r: the buffer's rank among the staged ones)

and ``Copy_X[h, b, kt, o]`` writes ``X_sh[h, b, o]`` (the last two of ``o`` swapped for a
transposed tile) from ``X[lo + o]``. The barriers are
``Sync_copied[h, b, kt]`` at ``[1, kt, 0, R]`` and ``Sync_next[h, b, kt]`` at
``[1, kt, 2]`` for ``kt + 1 < tiles``, run by every thread of the block: their domains do
not depend on the thread, so all threads meet them. A statement instance ``x`` in the
scope that read ``X[e(x)]`` reads ``X_sh[h, b, e(x) - lo(b, kt(x))]``.

Double-buffered (``Staging.slots`` 2), tile ``kt`` goes into slot ``kt mod 2`` of
``X_sh[h, b, slot, o]`` and is copied one step early, at ``[1, kt - 1, 0, r, n]`` (tile 0 at
step -1, before the loop's first step), with ``cp.async``: the copy is in flight while the
block computes step ``kt - 1`` from the other slot. One barrier ``Sync_step[h, b, k]`` at
``[1, k, 2]`` for ``-1 <= k < tiles`` ends each step; before it every thread
waits for its own copies (``cp.async.wait_all``). A copy's write may land at any time
between its issue and that barrier, which ``verify`` accounts for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import islpy as isl

from polymap.ir.nodes import Program
from polymap.mapping.staging import StagedBuffer, staged_buffers, tiled_loop
from polymap.poly.isl_text import isl_expr
from polymap.poly.model import PolyModel, StatementModel
from polymap.schedule.hardware import Frame, param_prefix, time_width


@dataclass(frozen=True, slots=True, eq=False)
class CopyVectors:
    """The groups of a copy that moves ``width`` neighbours of a row per load
    (``StagedBuffer.copy``): group ``CopyV_X[h, b, kt, o_0 .. o_{m-1}, g]`` holds the lanes
    ``Copy_X[h, b, kt, o_0 .. o_{m-1}, width g + e]``, ``0 <= e < width``. A thread runs whole
    groups (``steps``: its n-th is group ``n threads + tid`` in row-major order), each lane
    that is in the copy's domain; the vector load serves a group where every lane is, which
    ``condition`` (the row's length a multiple of the width) implies: ``verify`` proves it
    and that the first lane's index in the row is a multiple of the width."""

    width: int
    name: str  # isl tuple name of the group statement
    domain: isl.Set  # the groups with a lane in the copy's domain
    steps: isl.Map  # [h, b, t, kt, n] -> CopyV_X[..]: the group a thread copies at step n
    time: isl.Map  # [[h, b, t, kt, n] -> CopyV_X[..]] -> time
    lanes: tuple[isl.Map, ...]  # per lane e: CopyV_X[..] -> Copy_X[..] (every group, in the domain or not)
    every: isl.Map  # CopyV_X[..] -> Copy_X[..]: all the lanes of every group
    inside: tuple[isl.Set, ...]  # per lane e: the groups whose lane e is in the copy's domain
    reads: tuple[isl.Map, ...]  # per lane e: CopyV_X[..] -> X[..], the global element (unrestricted)
    condition: isl.Set  # parameters: the row's length a multiple of the width (with the context)


@dataclass(frozen=True, slots=True, eq=False)
class CopyRelation:
    """The cooperative copy of one staged buffer: per element (``relation``, what ``verify``
    proves of reads and barriers) and, where it moves vectors, per group of a row
    (``vectors``, what the AST runs)."""

    buffer: StagedBuffer
    rank: int
    name: str  # isl tuple name of the copy statement
    shared: str  # isl tuple name of the shared array
    domain: isl.Set  # Copy_X[h, b, kt, o]: the elements copied, per block and tile
    relation: isl.Map  # [h, b, t, kt, n] -> Copy_X[h, b, kt, o]
    time: isl.Map  # [[h, b, t, kt, n] -> Copy_X[..]] -> time
    writes: isl.Map  # [[h, b, t, kt, n] -> Copy_X[..]] -> X_sh[h, b, o]
    origin: tuple[tuple[int, str], ...]  # lo_d = c_d * kt + rest_d (rest over sizes, h, b)
    source: isl.Map  # Copy_X[h, b, kt, o] -> X[lo + o]: the global element a copy instance reads
    vectors: CopyVectors | None = None  # None: one element per step

    def origin_at(self, kt: str) -> tuple[str, ...]:
        return _origin_at(self.origin, kt)

    @property
    def steps(self) -> tuple[isl.Map, isl.Map]:
        """What the AST schedules: ``hw -> instance`` and its time, per element or per group."""
        if self.vectors is None:
            return self.relation, self.time
        return self.vectors.steps, self.vectors.time


def _origin_at(origin: tuple[tuple[int, str], ...], kt: str) -> tuple[str, ...]:
    """The isl expressions of a tile's origin at tile ``kt``."""
    return tuple(f"{c}*({kt}) + {rest}" if c else rest for c, rest in origin)


@dataclass(frozen=True, slots=True, eq=False)
class BarrierRelation:
    name: str  # Sync_copied or Sync_next
    relation: isl.Map  # [h, b, t, kt] -> Sync[h, b, kt] (every thread)
    time: isl.Map  # Sync[h, b, kt] -> time


@dataclass(frozen=True, slots=True, eq=False)
class SharedPlan:
    """Everything shared memory adds to one staged kernel."""

    frame: Frame
    copies: tuple[CopyRelation, ...]
    barriers: tuple[BarrierRelation, ...]


def shared_plan(model: PolyModel, frame: Frame, body_width: int) -> SharedPlan | None:
    """The copies and barriers of a mapped kernel; None when it stages nothing."""
    km = frame.mapping
    if km.staging is None:
        return None
    program: Program = model.program
    names, params = model.names, model.params
    h = frame.host
    host, blocks, threads = frame.hw[:h], frame.hw[h : h + 3], frame.hw[h + 3 : h + 6]
    kt = names.fresh("kt")
    env = {p: names[p] for p in params}
    env.update((loop.index, x) for loop, x in zip(km.kernel.host_loops, host))
    staging = km.staging
    loop = tiled_loop(km)
    extent = None if loop is None else isl_expr(loop.extent, env, params)
    tiles = f"{kt} = 0" if loop is None else f"0 <= {kt} and {staging.tile}*{kt} < {extent}"
    width = time_width(km, body_width)
    prefix = param_prefix(model)
    block_limits = [c for c in frame.limits if not any(t in c.split() for t in threads + frame.hw[h + 6 :])]
    dims = km.block_dim()
    tid = f"{threads[0]} + {dims[0]}*{threads[1]} + {dims[0] * dims[1]}*{threads[2]}"
    thread_limits = [f"0 <= {t} < {n}" for t, n in zip(threads, dims)]
    staged = staged_buffers(km, program)
    copies = []
    for rank, sb in enumerate(staged):
        c = sb.candidate
        decl = program.buffer(c.buffer)
        o = [names.fresh(f"o{d}") for d in range(len(sb.widths))]
        origin = []
        # a loop of the offsets (``StageCandidate.per_block``) runs one iteration per block:
        # its index is the block's coordinate
        at_block = {**env, **{u: blocks[km.loop(u).block_axis.position] for u in c.per_block}}
        for v, r in zip(c.dims, c.offsets):
            rest = isl_expr(r, at_block, params)
            if v is None:
                origin.append((0, f"({rest})"))
            elif v == staging.loop:
                origin.append((staging.tile, f"({rest})"))
            else:
                lm = km.loop(v)
                g = blocks[lm.block_axis.position]
                origin.append((0, f"{lm.threads * lm.seq}*{g} + ({rest})"))
        cons = list(block_limits) + [tiles]
        for od, w, lo, size in zip(o, sb.widths, _origin_at(tuple(origin), kt), decl.shape):
            cons += [f"0 <= {od} < {w}", f"0 <= {lo} + {od} < {isl_expr(size, env, params)}"]
        name = names.fresh(f"Copy_{c.buffer}")
        shared = names.fresh(f"{c.buffer}_sh")
        inst = f"{name}[{', '.join(host + blocks + (kt,) + tuple(o))}]"
        domain = isl.Set(f"{prefix}{{ {inst} : {' and '.join(cons)} }}").intersect_params(model.context)
        n = names.fresh("n")
        hw = host + blocks + threads + (kt, n)
        # double-buffered: tile kt is copied during step kt - 1, before that step's compute
        step_of_copy = f"{kt} - 1" if staging.double_buffered else kt
        time = ["1", step_of_copy, "0", str(rank), n] + ["0"] * (width - 5)
        element = [f"({lo}) + {od}" for lo, od in zip(_origin_at(tuple(origin), kt), o)]
        source = isl.Map(f"{prefix}{{ {inst} -> {model.tuples[c.buffer]}[{', '.join(element)}] }}")
        step = _Step(prefix, hw, time, f"{km.threads_per_block}*{n} + {tid}", thread_limits)
        vectors = None
        if sb.copy == 1:
            relation = step.run(inst, o, sb.widths).intersect_range(domain)
        else:
            row = isl_expr(decl.shape[-1], env, params)
            group = (names.fresh(f"CopyV_{c.buffer}"), host + blocks + (kt,))
            vectors = _copy_vectors(model, group, (name, o), sb, domain, source, step, row)
            relation = vectors.steps.apply_range(vectors.every).intersect_range(domain).coalesce()
        time_map = isl.Map(f"{prefix}{{ [[{', '.join(hw)}] -> {inst}] -> [{', '.join(time)}] }}")
        stored = host + blocks + _slot(staging.slots, kt) + sb.in_shared_order(tuple(o))
        writes = isl.Map(f"{prefix}{{ [[{', '.join(hw)}] -> {inst}] -> {shared}[{', '.join(stored)}] }}")
        wrapped = relation.wrap()
        copies.append(
            CopyRelation(
                sb,
                rank,
                name,
                shared,
                domain,
                relation,
                time_map.intersect_domain(wrapped),
                writes.intersect_domain(wrapped),
                tuple(origin),
                source.intersect_domain(domain),
                vectors,
            )
        )
    barriers = []
    every = f"[{', '.join(host + blocks + threads + (kt,))}]"
    at = f"{', '.join(host + blocks + (kt,))}"
    base = list(block_limits) + [tiles] + thread_limits
    syncs = (
        ("Sync_copied", [], ["1", kt, "0", str(len(staged))]),
        (
            "Sync_next",
            [f"{staging.tile}*({kt} + 1) < {extent}"] if loop is not None else None,
            ["1", kt, "2"],
        ),
    )
    if staging.double_buffered:
        # one barrier a step, after its compute (from step -1, which only copies tile 0): the
        # next tile's copy, in flight during this step, is then complete (each thread waits
        # for its own copies first) and seen by every thread, and this step's tile is read
        # by none before the copy of the step after next overwrites its slot. The last step
        # has one too, though nothing follows it: the tile loop then ends where the barriers
        # do, the same for every thread (without it, a thread with no compute in the last
        # tile would leave the loop one step early, and isl bounds the loop per thread)
        base = [c for c in base if c != tiles] + [f"{kt} >= -1", f"{staging.tile}*{kt} < {extent}"]
        syncs = (("Sync_step", [], ["1", kt, "2"]),)
    for label, extra, time in syncs:
        if extra is None:
            continue  # one tile: nothing comes after it
        sync = names.fresh(label)
        relation = isl.Map(
            f"{prefix}{{ {every} -> {sync}[{at}] : {' and '.join(base + extra)} }}"
        ).intersect_params(model.context)
        time = time + ["0"] * (width - len(time))
        time_map = isl.Map(f"{prefix}{{ {sync}[{at}] -> [{', '.join(time)}] }}")
        barriers.append(BarrierRelation(sync, relation, time_map.intersect_domain(relation.range())))
    return SharedPlan(frame, tuple(copies), tuple(barriers))


@dataclass(frozen=True, slots=True)
class _Step:
    """How a thread walks a copy: step ``n`` of thread ``tid`` takes the instance whose
    row-major position is ``at`` (``n threads + tid``), at time ``time``."""

    prefix: str
    hw: tuple[str, ...]
    time: list[str]
    at: str
    limits: list[str]

    def run(self, inst: str, dims, widths) -> isl.Map:
        """``hw -> inst``: the instance of row-major position ``at`` in a box of ``widths``."""
        strides = [math.prod(widths[d + 1 :]) for d in range(len(widths))]
        linear = " + ".join(f"{s}*{v}" for s, v in zip(strides, dims))
        cons = " and ".join([f"{linear} = {self.at}", *self.limits])
        return isl.Map(f"{self.prefix}{{ [{', '.join(self.hw)}] -> {inst} : {cons} }}")

    def timed(self, inst: str) -> isl.Map:
        return isl.Map(f"{self.prefix}{{ [[{', '.join(self.hw)}] -> {inst}] -> [{', '.join(self.time)}] }}")


def _copy_vectors(
    model: PolyModel,
    group_name: tuple[str, tuple[str, ...]],
    element: tuple[str, list[str]],
    sb: StagedBuffer,
    domain: isl.Set,
    source: isl.Map,
    step: _Step,
    row: str,
) -> CopyVectors:
    """The groups of a vector copy (``CopyVectors``): ``group_name`` the group statement's
    name and its leading dimensions ``[h, b, kt]``, ``element`` the copy's name and offsets
    ``o``, ``row`` the buffer's row length as an isl expression."""
    width, prefix = sb.copy, step.prefix
    (name, outer), (head, o) = group_name, element
    outer = list(outer)
    inst = f"{head}[{', '.join(outer + o)}]"
    g = model.names.fresh("g")
    group = f"{name}[{', '.join(outer + o[:-1] + [g])}]"
    lanes = []
    for e in range(width):
        lane = f"{head}[{', '.join(outer + o[:-1] + [f'{width}*{g} + {e}'])}]"
        lanes.append(isl.Map(f"{prefix}{{ {group} -> {lane} }}"))
    every = isl.Map(f"{prefix}{{ {group} -> {inst} : {width}*{g} <= {o[-1]} < {width}*{g} + {width} }}")
    groups = domain.apply(every.reverse()).coalesce()
    widths = sb.widths[:-1] + (sb.widths[-1] // width,)
    steps = step.run(group, o[:-1] + [g], widths).intersect_range(groups).coalesce()
    reads = tuple(lane.apply_range(source) for lane in lanes)
    condition = isl.Set(f"{prefix}{{ : ({row}) mod {width} = 0 }}").intersect_params(model.context)
    return CopyVectors(
        width,
        name,
        groups,
        steps,
        step.timed(group).intersect_domain(steps.wrap()),
        tuple(lanes),
        every,
        tuple(domain.apply(lane.reverse()) for lane in lanes),
        reads,
        condition,
    )


def shared_reads(
    model: PolyModel, plan: SharedPlan, s: StatementModel, relation: isl.Map, hw: tuple[str, ...]
) -> list[tuple[CopyRelation, isl.Map]]:
    """The shared-memory reads of a statement of the scope: per staged buffer it reads,
    ``[[hw] -> S[x]] -> Copy_X[h, b, kt(x), e(x) - lo(b, kt(x))]`` over the points that
    run it: the copy instance that must have put the element there (``element_of`` gives
    the shared element ``X_sh[h, b, o]`` it wrote)."""
    h = plan.frame.host
    host, blocks = plan.frame.hw[:h], plan.frame.hw[h : h + 3]
    out = []
    for copy in plan.copies:
        if s.name not in copy.buffer.candidate.reads:
            continue
        kt, offsets = _tile_element(model, plan, s, copy)
        element = f"{copy.name}[{', '.join(host + blocks + (kt,) + offsets)}]"
        inst = f"{s.domain.get_tuple_name()}[{', '.join(s.dims)}]"
        read = isl.Map(f"{param_prefix(model)}{{ [[{', '.join(hw)}] -> {inst}] -> {element} }}")
        out.append((copy, read.intersect_domain(relation.wrap())))
    return out


def tile_read(model: PolyModel, plan: SharedPlan, s: StatementModel, copy: CopyRelation) -> isl.Map:
    """``S[x] -> X_sh[e(x) - lo(b, kt(x))]`` with the host indices and block coordinates as
    parameters (as inside a kernel): where in the tile a statement of the scope finds the
    element it reads; the same offsets that ``shared_reads`` proves covered by a copy."""
    h = plan.frame.host
    kt, offsets = _tile_element(model, plan, s, copy)
    params = [model.names[p] for p in model.params] + list(plan.frame.hw[: h + 3])
    inst = f"{s.domain.get_tuple_name()}[{', '.join(s.dims)}]"
    stored = _slot(copy.buffer.slots, kt) + copy.buffer.in_shared_order(offsets)
    return isl.Map(
        f"[{', '.join(params)}] -> {{ {inst} -> {copy.shared}[{', '.join(stored)}] }}"
    ).intersect_domain(s.domain)


def _tile_element(
    model: PolyModel, plan: SharedPlan, s: StatementModel, copy: CopyRelation
) -> tuple[str, tuple[str, ...]]:
    """The tile ``kt(x)`` an instance of a scope statement reads in, and the offsets
    ``e(x) - lo(b, kt(x))`` of its element in that tile, as isl expressions over the
    statement's dimensions (and the sizes, host indices and block coordinates)."""
    km = plan.frame.mapping
    names, params = model.names, model.params
    env = {p: names[p] for p in params}
    env.update((loop.index, d) for loop, d in zip(s.loops, s.dims))
    kt = "0"
    if km.staging.loop is not None:
        k = s.dims[[loop.index for loop in s.loops].index(km.staging.loop)]
        kt = f"floor({k}/{km.staging.tile})"
    offsets = tuple(
        f"({isl_expr(e, env, params)}) - ({lo})"
        for e, lo in zip(copy.buffer.candidate.indices, copy.origin_at(kt))
    )
    return kt, offsets


def _slot(slots: int, kt: str) -> tuple[str, ...]:
    """The leading index of a double-buffered tile's shared array (``Staging.slots``): tile
    ``kt`` goes into slot ``kt mod 2``; none where a buffer holds one tile."""
    return (f"({kt}) mod {slots}",) if slots > 1 else ()


def element_of(copy: CopyRelation) -> isl.Map:
    """``Copy_X[h, b, kt, o] -> X_sh[h, b, o]``: the shared element a copy instance writes."""
    space = copy.domain.get_space()
    dims = [space.get_dim_name(isl.dim_type.set, k) for k in range(space.dim(isl.dim_type.set))]
    rank = len(copy.buffer.widths)
    kt = dims[len(dims) - rank - 1]
    kept = (
        dims[: len(dims) - rank - 1]
        + list(_slot(copy.buffer.slots, kt))
        + list(copy.buffer.in_shared_order(tuple(dims[len(dims) - rank :])))
    )
    params = [space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))]
    return isl.Map(
        f"[{', '.join(params)}] -> {{ {copy.name}[{', '.join(dims)}] -> {copy.shared}[{', '.join(kept)}] }}"
    )
