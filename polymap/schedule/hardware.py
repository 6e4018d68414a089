"""The hardware relation of a mapped kernel: which thread runs which statement instance,
and in what order (the algebra is in ``verify.py``'s module docstring). ``verify`` proves
obligations over it; ``codegen`` generates the loops of each thread from it, so the code
that runs is the code that was proved."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polymap.ir.nodes import Loop
from polymap.mapping.space import Distribution, KernelMapping, LoopMapping
from polymap.mapping.staging import scope_position
from polymap.poly.isl_text import isl_expr
from polymap.poly.model import PolyModel, StatementModel

PHASES = 3  # the leading time coordinates of a staged kernel: phase, tile, part

HW_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass(frozen=True, slots=True, eq=False)
class Frame:
    """What all statements of a kernel share: ``hw`` are the isl names of the hardware
    dimensions before the body loops (host indices, b x3, t x3, s per band loop),
    ``labels`` their names in messages, ``limits`` the isl constraints on b, t and s."""

    mapping: KernelMapping
    host: int
    hw: tuple[str, ...]
    labels: tuple[str, ...]
    limits: tuple[str, ...]
    grid: tuple[str, ...]  # gridDim per axis, in words

    @property
    def outer(self) -> int:
        """Number of statement dimensions outside the body (host + band)."""
        return self.host + len(self.mapping.loops)

    def shown(self, k: int) -> bool:
        """Whether hardware dimension k is worth printing (host, used axes, s)."""
        if k < self.host:
            return True
        if k >= self.host + 6:
            return self.mapping.loops[k - self.host - 6].seq > 1
        axis = (k - self.host) % 3
        if k - self.host == 3 and self.mapping.lanes > 1:
            return True  # threadIdx.x: the lane
        used = (lm.block_axis if k - self.host < 3 else lm.thread_axis for lm in self.mapping.loops)
        return any(a.position == axis for a in used)


def param_prefix(model: PolyModel) -> str:
    return "[" + ", ".join(model.names[p] for p in model.params) + "] -> "


def frame_of(model: PolyModel, km: KernelMapping) -> Frame:
    names, params = model.names, model.params
    kernel = km.kernel
    host = [names.fresh(f"h_{loop.index}") for loop in kernel.host_loops]
    blocks = [names.fresh(f"b{a}") for a in "xyz"]
    threads = [names.fresh(f"t{a}") for a in "xyz"]
    seqs = [names.fresh(f"s_{lm.index}") for lm in km.loops]
    limits = [f"0 <= {t} < {n}" for t, n in zip(threads, km.block_dim())]
    limits += [f"0 <= {s} < {lm.seq}" for s, lm in zip(seqs, km.loops)]
    last = {lm.block_axis.position: j for j, lm in enumerate(km.loops)}
    grid = []
    for a, b in enumerate(blocks):
        if a not in last:
            limits.append(f"{b} = 0")
            grid.append("1")
        elif not params:
            limits.append(f"0 <= {b} < {km.grid_dim()[a]}")
            grid.append(str(km.grid_dim()[a]))
        else:
            j = last[a]
            limits.append(_parametric_grid(model, kernel.host_loops + kernel.band[: j + 1], b, km.loops[j]))
            span = km.loops[j].threads * km.loops[j].seq
            grid.append(f"ceil(max({km.loops[j].extent}) / {span})")
    labels = [loop.index for loop in kernel.host_loops] + list(HW_AXES) + [f"s_{lm.index}" for lm in km.loops]
    return Frame(
        km, len(host), tuple(host + blocks + threads + seqs), tuple(labels), tuple(limits), tuple(grid)
    )


def _parametric_grid(model: PolyModel, nest: tuple[Loop, ...], b: str, lm: LoopMapping) -> str:
    """``0 <= b and exists x in nest[:-1]: b T S < extent(x)``: b ranges over
    ceil(N^max / (T S)) blocks, N^max the last loop's extent maximised over the others."""
    names, params = model.names, model.params
    env = {p: names[p] for p in params}
    xs, inside = [], []
    for loop in nest[:-1]:
        x = names.fresh(f"x_{loop.index}")
        inside.append(f"0 <= {x} < {isl_expr(loop.extent, env, params)}")
        env[loop.index] = x
        xs.append(x)
    inside.append(f"{lm.threads * lm.seq}*{b} < {isl_expr(nest[-1].extent, env, params)}")
    body = " and ".join(inside)
    return f"0 <= {b} and " + (f"exists ({', '.join(xs)} : {body})" if xs else body)


def phase_prefix(km: KernelMapping, position: int, first_body_dim: str | None) -> list[str]:
    """The three leading coordinates of a statement's time in a staged kernel
    (``staging.py``): ``[0, 0, 0]`` before the tiled loop, ``[1, kt, 1]`` inside it
    (``kt = floor(k / K)``, k its first body dimension), ``[2, 0, 0]`` after it; nothing
    in a kernel without staging."""
    staging = km.staging
    if staging is None:
        return []
    scope = scope_position(km)
    if scope is None:
        return ["1", "0", "1"]
    if position < scope:
        return ["0", "0", "0"]
    if position > scope:
        return ["2", "0", "0"]
    return ["1", f"floor({first_body_dim}/{staging.tile})", "1"]


@dataclass(frozen=True, slots=True)
class TimeLayout:
    """The coordinates of a thread's time vector, in order: the three phase coordinates of a
    staged kernel (phase, tile, part: ``phase_prefix``), one s-point per band loop, then the
    body's 2d+1 textual order; or, where the points interleave, the body's order first and
    the s-points last (every step of the body runs for all points: outer-product order).
    ``verify`` orders instances by it, ``shared`` places the copies and barriers in it, and
    ``codegen`` names and unrolls its loops by it."""

    phases: int  # PHASES in a staged kernel, else 0
    points: int  # one s_j per band loop
    body: int  # the body's order: 2 * (deepest body nest) + 1
    interleaved: bool = False  # the s-points after the body's order

    @property
    def width(self) -> int:
        return self.phases + self.points + self.body

    @property
    def point_dims(self) -> slice:
        """Where the thread's s-points are (the loops a thread unrolls)."""
        if self.interleaved:
            return slice(self.phases + self.body, self.width)
        return slice(self.phases, self.phases + self.points)

    @property
    def body_dims(self) -> slice:
        if self.interleaved:
            return slice(self.phases, self.phases + self.body)
        return slice(self.phases + self.points, self.width)


def time_layout(km: KernelMapping, body_width: int) -> TimeLayout:
    return TimeLayout(PHASES if km.staging is not None else 0, len(km.loops), body_width, km.interleaved)


def time_width(km: KernelMapping, body_width: int) -> int:
    """The length of a thread's time vector: phases, s-points, the body's order."""
    return time_layout(km, body_width).width


@dataclass(frozen=True, slots=True, eq=False)
class Executed:
    """A statement as the hardware runs it: ``relation`` hw -> S (``R_S``), ``time`` the
    per-thread order ``[hw -> S] -> [s.., body schedule]`` and ``launch`` S -> launch vector."""

    stmt: StatementModel
    frame: Frame
    relation: isl.Map
    time: isl.Map
    launch: isl.Map
    labels: tuple[str, ...]  # every hardware dimension, body loops included
    clock: tuple[str, ...]  # isl expressions of the per-thread order over ``relation``'s domain
    dims: tuple[str, ...]  # isl names of ``relation``'s domain dimensions (``hw`` + body loops)


def band_index(lm: LoopMapping, g: str, t: str, s: str) -> str:
    """The isl expression of a band loop's index from its block, thread and point."""
    span = lm.threads * lm.seq
    if lm.distribution is Distribution.CYCLIC:
        return f"{span}*{g} + {lm.threads}*{s} + {t}"
    if lm.distribution is Distribution.GROUPED:
        v = lm.group
        return f"{span}*{g} + {lm.threads * v}*floor({s}/{v}) + {v}*{t} + ({s} mod {v})"
    return f"{span}*{g} + {lm.seq}*{t} + {s}"


def band_constraints(
    model: PolyModel, frame: Frame, around: tuple[Loop, ...] = (), iterators: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """Over the hardware point ``[h, b, t, s]``: the launch's constraints (the frame's limits,
    the host indices in their loops), and the band's (each band index below its extent);
    with ``around``, loops of the thread body (a spread loop's enclosing loops), the
    second list also bounds their ``iterators`` (isl names), each in its loop."""
    km = frame.mapping
    names, params = model.names, model.params
    h, hw = frame.host, frame.hw
    b, t, sq = hw[h : h + 3], hw[h + 3 : h + 6], hw[h + 6 :]
    env = {p: names[p] for p in params}
    launch = list(frame.limits)
    for loop, x in zip(km.kernel.host_loops, hw[:h]):
        launch.append(f"0 <= {x} < {isl_expr(loop.extent, env, params)}")
        env[loop.index] = x
    inside = []
    for loop, lm, s in zip(km.kernel.band, km.loops, sq):
        index = f"({band_index(lm, b[lm.block_axis.position], t[lm.thread_axis.position], s)})"
        inside.append(f"{index} < {isl_expr(loop.extent, env, params)}")
        env[loop.index] = index
    for loop, n in zip(around, iterators):
        inside.append(f"0 <= {n} < {isl_expr(loop.extent, env, params)}")
        env[loop.index] = n
    return launch, inside


def executed(model: PolyModel, frame: Frame, s: StatementModel, key, depth: int, width: int) -> Executed:
    names, params = model.names, model.params
    km, h, outer = frame.mapping, frame.host, frame.outer
    hw_b, hw_t, hw_s = frame.hw[h : h + 3], frame.hw[h + 3 : h + 6], frame.hw[h + 6 :]
    body = [names.fresh(f"n_{loop.index}") for loop in s.loops[outer:]]
    env = {p: names[p] for p in params}
    cons = list(frame.limits)
    # with lanes (``mapping/lanes.py``) the lane is threadIdx.x: a spread loop's iteration
    # j runs on lane j mod lanes at the loop's own step j div lanes; the rest on lane 0
    # (the loops around a spread loop on every lane: each runs its own copy of them)
    spread = km.spread_of(s.name) if km.lanes > 1 else None
    if km.lanes > 1 and spread is None:
        cons.append(f"{hw_t[0]} = 0")
    lane_dim = outer + spread.depth if spread is not None else None
    for k, (loop, d) in enumerate(zip(s.loops, s.dims)):
        extent = isl_expr(loop.extent, env, params)
        if k < h:
            cons += [f"{d} = {frame.hw[k]}", f"0 <= {d} < {extent}"]
        elif k < outer:
            j = k - h
            lm = km.loops[j]
            g, t, sq = hw_b[lm.block_axis.position], hw_t[lm.thread_axis.position], hw_s[j]
            cons.append(f"{d} = {band_index(lm, g, t, sq)}")
            if lm.guard:
                cons.append(f"{d} < {extent}")
        elif k == lane_dim:
            cons += [f"{d} = {km.lanes}*{body[k - outer]} + {hw_t[0]}", f"0 <= {d} < {extent}"]
        else:
            cons += [f"{d} = {body[k - outer]}", f"0 <= {d} < {extent}"]
        env[loop.index] = d
    hw = list(frame.hw) + body
    tuple_name = s.domain.get_tuple_name()
    prefix = param_prefix(model)
    relation = isl.Map(
        f"{prefix}{{ [{', '.join(hw)}] -> {tuple_name}[{', '.join(s.dims)}] : {' and '.join(cons)} }}"
    ).intersect_params(model.context)
    if s.stmt.guard is not None:  # the if around it: only the instances of its domain run
        relation = relation.intersect_range(s.domain)
    position = s.ctx.position
    order = [str(position[outer])]
    for n, p in zip(body, position[outer + 1 :]):
        order += [n, str(p)]
    order += ["0"] * (width - len(order))
    phases = tuple(phase_prefix(km, position[outer], body[0] if body else None))
    if km.interleaved:  # outer-product order: each step of the body for every point
        clock_exprs = phases + tuple(order) + tuple(hw_s)
    else:
        clock_exprs = phases + tuple(hw_s) + tuple(order)
    clock = isl.Map(f"{prefix}{{ [{', '.join(hw)}] -> [{', '.join(clock_exprs)}] }}")
    vector = []
    for d in range(h):
        vector += [str(key[d]), s.dims[d]]
    vector.append(str(key[h]))
    vector += ["0"] * (2 * depth + 1 - len(vector))
    launch = isl.Map(f"{prefix}{{ {tuple_name}[{', '.join(s.dims)}] -> [{', '.join(vector)}] }}")
    labels = frame.labels + tuple(loop.index for loop in s.loops[outer:])
    return Executed(
        s, frame, relation, relation.domain_map().apply_range(clock), launch, labels, clock_exprs, tuple(hw)
    )
