"""The decision space of thread mapping: kernels, their decisions, pins, and a Mapping.

Kernels. The top level of a program is cut into kernels: a top-level ``par`` loop starts a
kernel whose *band* is the chain of par loops perfectly nested under it (at most three: one
per hardware axis); the band's innermost body runs inside each thread. A top-level ``seq``
loop that contains par loops becomes a *host loop* launching the kernels of its body once
per iteration, in order. Any other top-level statement (no par loop around it) is a serial
kernel: one block of one thread.

Decisions for every band loop ``j`` with extent at most ``N_j`` (Telamon-style, each can be
pinned):

* ``threads`` T_j, ``seq`` S_j (powers of two) and ``blocks`` G_j = ceil(N_j / (T_j S_j)),
  so G_j T_j S_j >= N_j, with a guard ``i_j < extent`` where the product overshoots;
* ``thread_axis`` and ``block_axis`` in {x, y, z}, distinct within a kernel: the linear
  thread id is tid = t_x + T_x t_y + T_x T_y t_z, so the loop on x has neighbouring lanes;
* ``distribution`` of the sequential part::

      cyclic:  i_j = g_j * T_j * S_j + s_j * T_j + t_j
      blocked: i_j = g_j * T_j * S_j + t_j * S_j + s_j
      grouped: i_j = g_j * T_j * S_j + (s_j div V_j) * T_j * V_j + t_j * V_j + s_j mod V_j

  with 0 <= g_j < G_j, 0 <= t_j < T_j, 0 <= s_j < S_j, and for grouped a *group* of
  ``V_j`` points (a power of two, 1 < V_j < S_j): a thread's points come in groups of
  ``V_j`` neighbours, the groups ``T_j V_j`` apart. All three are one formula with the
  *step* ``V_j`` between neighbouring threads: 1 (cyclic), ``S_j`` (blocked) or the group.
  A group of 16 bytes of elements is read with one vector load, and the lanes of a warp
  are then 16 bytes apart, where blocked points put them ``S_j`` elements apart (the
  4-byte banks of shared memory serve such lanes with conflicts: ``cost_model.bank_factor``).

One decision for the kernel, the order of a thread's points (``interleaved``): either the
thread runs its s-points one after another (outer band loops first), the whole band body
at each; or the points *interleave*: every step of the body runs for all of the thread's
points before the next step (``for k: for s_i: for s_j: C[i, j] += A[i, k] * B[k, j]``,
the outer-product order of a register tile). Points are iterations of par loops, so both
orders keep every dependence (``verify`` proves it of the order chosen); interleaving lets
one value read in a step serve every point that reads it (a fragment held in a register),
at the price of one copy of each of the body's block-local buffers per point.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, replace
from typing import Any

from polymap.errors import ArgumentError
from polymap.ir.accumulators import IDEMPOTENT
from polymap.ir.nodes import AssignOp, IndexExpr, Loop, New, Program, Stmt

MAX_BAND = 3  # one par loop per hardware axis
# the lanes a band point may have beyond one thread: a warp, or 2 to 32 warps (a block per
# point; a pin's text is checked before any target is known, the target's block limit after).
# The lanes' code is written for warps of 32 (its shuffles' masks and butterflies)
WARP_LANES = 32
LANE_COUNTS = tuple(WARP_LANES << m for m in range(6))


class Axis(enum.Enum):
    X = "x"
    Y = "y"
    Z = "z"

    @property
    def position(self) -> int:
        return "xyz".index(self.value)


class Distribution(enum.Enum):
    CYCLIC = "cyclic"  # i = g*T*S + s*T + t: a thread's points are T apart
    BLOCKED = "blocked"  # i = g*T*S + t*S + s: a thread's points are consecutive
    GROUPED = "grouped"  # i = g*T*S + (s div V)*T*V + t*V + s mod V: groups of V consecutive points


# ------------------------------------------------------------------------ kernels


@dataclass(frozen=True, slots=True)
class Kernel:
    """A unit launched on the GPU: ``band`` par loops mapped to blocks and threads,
    ``body`` run by each thread, inside the top-level seq loops ``host_loops``."""

    name: str
    band: tuple[Loop, ...]
    body: tuple[Stmt, ...]
    host_loops: tuple[Loop, ...]

    @property
    def indices(self) -> tuple[str, ...]:
        return tuple(loop.index for loop in self.band)

    @property
    def is_serial(self) -> bool:
        return not self.band

    def __repr__(self) -> str:
        band = ", ".join(self.indices) or "none (serial)"
        host = f"; host loops {', '.join(h.index for h in self.host_loops)}" if self.host_loops else ""
        return f"<Kernel {self.name}: band {band}{host}>"


def kernels(program: Program) -> tuple[Kernel, ...]:
    """The kernels of a program in launch order (see the module docstring)."""
    found: list[Kernel] = []

    def contains_par(stmt: Stmt) -> bool:
        return isinstance(stmt, Loop) and (stmt.is_par or any(contains_par(s) for s in stmt.body))

    def visit(block: tuple[Stmt, ...], host: tuple[Loop, ...]) -> None:
        for stmt in block:
            name = f"kernel{len(found)}"
            if isinstance(stmt, Loop) and stmt.is_par:
                band = [stmt]
                while len(band) < MAX_BAND and len(band[-1].body) == 1:
                    inner = band[-1].body[0]
                    if not (isinstance(inner, Loop) and inner.is_par):
                        break
                    band.append(inner)
                found.append(Kernel(name, tuple(band), band[-1].body, host))
            elif isinstance(stmt, Loop) and contains_par(stmt):
                visit(stmt.body, host + (stmt,))
            elif not _is_declaration(stmt):
                found.append(Kernel(name, (), (stmt,), host))

    visit(program.body, ())
    return tuple(found)


def _is_declaration(stmt: Stmt) -> bool:
    return isinstance(stmt, New)


# ---------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class LoopMapping:
    """The concrete decisions for one band loop (see the module docstring for the algebra)."""

    index: str
    thread_axis: Axis
    block_axis: Axis
    threads: int  # T: threads along thread_axis
    seq: int  # S: points each thread runs
    distribution: Distribution
    extent: IndexExpr  # the loop's extent (may mention sizes and outer band indices)
    max_extent: int  # the largest extent over the domain at the sizes mapped for
    guard: bool = True  # the emitted code tests ``index < extent`` (needed where G*T*S overshoots)
    group: int = 1  # V: a grouped loop's neighbouring points (1 < V < S, a power of two)

    def __post_init__(self) -> None:
        grouped = self.distribution is Distribution.GROUPED
        if grouped != (self.group != 1) or (
            grouped and (self.group & (self.group - 1) or not 1 < self.group < self.seq)
        ):
            raise ArgumentError(
                f"loop '{self.index}': a grouped distribution has a group of points, a power of two "
                f"between 1 and S = {self.seq} (both excluded), and no other distribution has one; got "
                f"{self.distribution.value} with group {self.group}"
            )

    @property
    def step(self) -> int:
        """V: the iterations between neighbouring threads' points, and the points a thread
        runs one after another before the next group: 1 (cyclic), S (blocked) or the group."""
        if self.distribution is Distribution.CYCLIC:
            return 1
        return self.seq if self.distribution is Distribution.BLOCKED else self.group

    def iteration(self, block: int, thread: int, point: int) -> int:
        """The loop's formula (the module docstring): the iteration ``block``, ``thread`` and
        ``point`` run."""
        v = self.step
        return block * self.threads * self.seq + point // v * self.threads * v + thread * v + point % v

    def describe_distribution(self) -> str:
        """``cyclic``, ``blocked`` or ``grouped by V``."""
        if self.distribution is Distribution.GROUPED:
            return f"grouped by {self.group}"
        return self.distribution.value

    @property
    def blocks(self) -> int:
        """G = ceil(max_extent / (T * S)) at the sizes the mapping was made for."""
        return max(1, -(-self.max_extent // (self.threads * self.seq)))

    def index_formula(self) -> str:
        """The index as the emitted code computes it, with factors of 1 left out."""
        g, t, s = (
            f"blockIdx.{self.block_axis.value}",
            f"threadIdx.{self.thread_axis.value}",
            f"s_{self.index}",
        )
        span = self.threads * self.seq
        if self.distribution is Distribution.CYCLIC:
            terms = [(g, span), (s, self.threads), (t, 1)]
        elif self.distribution is Distribution.GROUPED:
            v = self.group
            terms = [(g, span), (f"({s}/{v})", self.threads * v), (t, v), (f"{s}%{v}", 1)]
        else:
            terms = [(g, span), (t, self.seq), (s, 1)]
        used = [
            (v, c) for v, c in terms if not (v == s and self.seq == 1) and not (v == t and self.threads == 1)
        ]
        return f"{self.index} = " + " + ".join(v if c == 1 else f"{v}*{c}" for v, c in used)


@dataclass(frozen=True, slots=True)
class Staging:
    """Shared-memory staging of one kernel (``staging.py``): the seq loop ``loop`` of the
    thread body runs in tiles of ``tile`` iterations (``loop`` None: the whole body is one
    tile, ``tile`` 1), and the reads of ``buffers`` in it come from shared memory. The tiles
    of ``transposed`` (some of ``buffers``) are stored with their last two dimensions
    swapped, so that a thread's points read one row of shared memory (``staging.py``).
    ``copy_vectors`` pairs a staged buffer with the elements its copy moves per load (a
    vector of up to 16 bytes, ``staging.copy_vector``); a buffer not named copies one
    element at a time. ``slots`` is the tiles each buffer holds at once: 2 (double
    buffering) where the next tile's copy is in flight, with ``cp.async``, while the block
    computes on this one (``schedule.shared``); 1 where the block copies, then computes."""

    loop: str | None
    tile: int
    buffers: tuple[str, ...]
    transposed: tuple[str, ...] = ()
    copy_vectors: tuple[tuple[str, int], ...] = ()
    slots: int = 1

    def copy_vector(self, buffer: str) -> int:
        """The elements one load of ``buffer``'s copy moves (1: scalar loads)."""
        return dict(self.copy_vectors).get(buffer, 1)

    def describe(self) -> str:
        where = f"loop '{self.loop}' in tiles of {self.tile}" if self.loop else "the whole body, one tile"
        turned = f", {', '.join(self.transposed)} stored transposed" if self.transposed else ""
        wide = [f"{b} in vectors of {n}" for b, n in self.copy_vectors if n > 1]
        copied = f", copies of {', '.join(wide)}" if wide else ""
        doubled = (
            ", double-buffered (the next tile's copy in flight while one is computed)"
            if self.double_buffered
            else ""
        )
        return f"{', '.join(self.buffers)} staged in shared memory over {where}{turned}{copied}{doubled}"

    @property
    def double_buffered(self) -> bool:
        return self.slots == 2


@dataclass(frozen=True, slots=True)
class SpreadLoop:
    """A loop of the thread body run by the lanes of a warp together (``lanes.py``): the
    loop over ``index`` at ``path`` (its position in the body, then in each loop around it:
    ``(3,)`` is the body's fourth statement, ``(3, 1)`` the second statement of that loop),
    iteration ``j`` on lane ``j mod lanes``. Every lane runs the loops around it (its
    *enclosing* loops, none for a loop of the body's top level), each fork and join once per
    iteration of them; lane 0 runs the rest of the body. At the loop's start (the *fork*) the
    other lanes start each accumulator of ``accumulators`` (a 0-d local updated by one
    associative and commutative operator) at the operator's identity, and take lane 0's
    value of each local of ``broadcasts``; at its end (the *join*) the lanes' partial
    accumulators are combined into every lane by a butterfly of shuffles. The block-local
    arrays of ``shared`` (declared outside it, read or written by it) are not a register of
    each thread: the kernel keeps one copy per band point in shared memory, which every lane
    reads and writes, the fork's and join's barriers ordering the lanes' accesses."""

    path: tuple[int, ...]
    index: str
    statements: tuple[str, ...]  # the statements inside it (S0, S1, ...)
    accumulators: tuple[tuple[str, AssignOp], ...]
    broadcasts: tuple[str, ...]
    reassociates: bool  # a float ``+=`` or ``*=`` among the accumulators: the sum's order changes
    shared: tuple[str, ...] = ()  # block-local arrays the lanes share (one copy per band point)
    # online sums (ir/online_sums.py), (maximum, its sums) per group: all are among the
    # accumulators (max= and +=: how each starts at the fork), and the join combines each
    # group together, the sums rescaled to the larger maximum
    online: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def relative_to(self) -> dict[str, str]:
        """The maximum each online sum is kept relative to, by sum."""
        return {total: top for top, totals in self.online for total in totals}

    def reduction_text(self, name: str, op: AssignOp) -> str:
        """An accumulator as the report and the header name it (``sum +=``, or ``sum +=
        (online, relative to mx)``)."""
        top = self.relative_to.get(name)
        return f"{name} {op.value}" + ("" if top is None else f" (online, relative to {top})")

    @property
    def from_lane0(self) -> tuple[str, ...]:
        """The locals whose value at the fork is lane 0's on every lane: the broadcasts, and
        the ``max=``/``min=`` accumulators (idempotent: they start from it; the others start
        at the identity)."""
        return (*self.broadcasts, *(name for name, op in self.accumulators if op in IDEMPOTENT))

    @property
    def depth(self) -> int:
        """The loops of the body around it (0: a loop of the body's top level)."""
        return len(self.path) - 1


def shared_arrays(spread: tuple[SpreadLoop, ...]) -> tuple[str, ...]:
    """The arrays these spread loops share (``SpreadLoop.shared``), each once, in order."""
    return tuple(dict.fromkeys(name for sp in spread for name in sp.shared))


def lanes_copies(lanes: int, threads_per_block: int) -> int:
    """Copies of the shared arrays in a block of ``threads_per_block`` threads with ``lanes``
    lanes a point: one per band point it holds (a warp each, or the whole block)."""
    return 1 if lanes > WARP_LANES else threads_per_block // WARP_LANES


def body_loops(body: tuple[Stmt, ...], path: tuple[int, ...]) -> tuple[Loop, ...]:
    """The loops of a thread body along ``path`` (a ``SpreadLoop``'s), outermost first: its
    enclosing loops, then the loop itself."""
    loops = []
    for position in path:
        loop = body[position]
        assert isinstance(loop, Loop), f"statement {position} on the path {path} is not a loop"
        loops.append(loop)
        body = loop.body
    return tuple(loops)


@dataclass(frozen=True, slots=True)
class KernelMapping:
    kernel: Kernel
    loops: tuple[LoopMapping, ...]  # in band order, outermost first
    staging: Staging | None = None  # None: every read from global memory
    interleaved: bool = False  # the thread's points run inside every step of the body
    # lanes > 1: a warp per band point: threadIdx.x is the lane, the band loops are on y and
    # z, and the loops of ``spread`` run over the lanes (``SpreadLoop``); lanes of several
    # warps: a block per band point (every band loop one thread), the warps' partial results
    # combined through shared memory (``codegen/lanes_c.py``)
    lanes: int = 1
    spread: tuple[SpreadLoop, ...] = ()

    def __repr__(self) -> str:
        """One line: each loop's axis and T x S (``describe`` and the report say the rest)."""
        loops = (
            ", ".join(f"{m.index} {m.thread_axis.value}:{m.threads}x{m.seq}" for m in self.loops) or "serial"
        )
        extra = (
            [f"stages {', '.join(self.staging.buffers)}"]
            if self.staging is not None and self.staging.buffers
            else []
        )
        extra += ["interleaved"] if self.interleaved else []
        extra += [f"{self.lanes} lanes"] if self.lanes > 1 else []
        return f"<KernelMapping {self.kernel.name}: {loops}{''.join('; ' + e for e in extra)}>"

    @property
    def points(self) -> int:
        """The s-points each thread runs: the product of the loops' S."""
        return math.prod(loop.seq for loop in self.loops)

    @property
    def threads_per_block(self) -> int:
        return self.lanes * math.prod(loop.threads for loop in self.loops)

    def spread_place(self, sp: SpreadLoop) -> str:
        """``'j' at 24:3``: a spread loop by its index and its place in the text (else by
        its statement's number in the body), for the report and the emitted header."""
        loop = body_loops(self.kernel.body, sp.path)[-1]
        place = ".".join(str(p + 1) for p in sp.path)
        where = f"at {loop.loc}" if loop.loc is not None else f"(statement {place} of the body)"
        return f"'{sp.index}' {where}"

    def spread_of(self, statement: str) -> SpreadLoop | None:
        """The spread loop a statement (``S3``) runs in, if any."""
        return next((sp for sp in self.spread if statement in sp.statements), None)

    @property
    def shared_locals(self) -> tuple[str, ...]:
        """The block-local arrays kept once per band point in shared memory, where every
        lane reads and writes them (``SpreadLoop.shared``): those any spread loop touches."""
        return shared_arrays(self.spread)

    @property
    def shared_copies(self) -> int:
        """Copies of the shared arrays in a block (``lanes_copies``)."""
        return lanes_copies(self.lanes, self.threads_per_block)

    @property
    def blocks(self) -> int:
        return math.prod(loop.blocks for loop in self.loops)

    def block_dim(self) -> tuple[int, int, int]:
        dims = [self.lanes, 1, 1]
        for loop in self.loops:
            dims[loop.thread_axis.position] = loop.threads
        return (dims[0], dims[1], dims[2])

    def grid_dim(self) -> tuple[int, int, int]:
        dims = [1, 1, 1]
        for loop in self.loops:
            dims[loop.block_axis.position] = loop.blocks
        return (dims[0], dims[1], dims[2])

    def loop(self, index: str) -> LoopMapping:
        for loop in self.loops:
            if loop.index == index:
                return loop
        raise KeyError(index)


# --------------------------------------------------------------------------- pins


@dataclass(frozen=True, slots=True)
class LoopPin:
    """Decisions fixed by the user for band loops of a given index name (``None``: free).

    Accepted at the API boundary as ``pins={"j": "threadIdx.x", "i": {"threads": 8,
    "seq": 2, "distribution": "blocked", "block": "y"}}``; a key ``"kernel1.j"`` pins only
    that kernel's loop ``j``."""

    thread_axis: Axis | None = None
    block_axis: Axis | None = None
    threads: int | None = None
    seq: int | None = None
    distribution: Distribution | None = None
    group: int | None = None  # a band loop's points kept together (1: cyclic; S: blocked)
    tile: int | None = None  # on a seq loop: its tile size (1: not tiled)
    stage: tuple[str, ...] | None = None  # on a seq loop: the buffers staged in its tiles
    transpose: tuple[str, ...] | None = None  # on a seq loop: the staged tiles stored transposed
    copy: int | None = None  # on a seq loop: the most elements one load of a tile's copy moves
    slots: int | None = None  # on a seq loop: the tiles held at once (2: double buffering)
    interleave: bool | None = None  # on a band loop: its kernel's points interleaved (or not)
    lanes: int | None = None  # on a band loop: lanes per point of its kernel (1, the warp or warps)
    split: int | None = (
        None  # on a reduction loop: the parts it is split into (1: not split; transform.split)
    )
    passes: bool | None = None  # on a select scan's loop: rewritten as exact passes (transform.scans)

    def items(self) -> tuple[tuple[str, Any], ...]:
        return tuple(
            (name, getattr(self, name)) for name in self.__slots__ if getattr(self, name) is not None
        )

    def describe(self) -> str:
        return ", ".join(f"{k}={v.value if isinstance(v, enum.Enum) else v}" for k, v in self.items())


@dataclass(frozen=True, slots=True)
class Pins:
    """Pins by loop key (``"j"`` or ``"kernel0.j"``), converted once from the user's form."""

    by_key: tuple[tuple[str, LoopPin], ...] = ()

    def for_loop(self, kernel: str, index: str) -> tuple[tuple[str, LoopPin], ...]:
        """The pins that apply to one band loop, each with the key it was given under."""
        return tuple((key, pin) for key, pin in self.by_key if key in (index, f"{kernel}.{index}"))

    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.by_key)

    def split_parts(self) -> dict[str, int]:
        """The ``split`` pins, by loop index (the pipeline's choice, not the mapping model's)."""
        return {key: pin.split for key, pin in self.by_key if pin.split is not None}

    def scan_passes(self) -> dict[str, bool]:
        """The ``passes`` pins, by loop index (the pipeline's choice, not the mapping model's)."""
        return {key: pin.passes for key, pin in self.by_key if pin.passes is not None}

    def without(self, name: str) -> Pins:
        """These pins less the field ``name`` (a pin left with no field is dropped)."""
        kept = ((key, replace(pin, **{name: None})) for key, pin in self.by_key)
        return Pins(tuple((key, pin) for key, pin in kept if pin.items()))


_AXIS_TEXT = re.compile(r"^(?:(threadidx|blockidx|thread|block|t|b)\.?)?([xyz])$")
_FIELD_ALIASES = {
    "thread": "thread_axis",
    "thread_axis": "thread_axis",
    "block": "block_axis",
    "block_axis": "block_axis",
    "threads": "threads",
    "seq": "seq",
    "distribution": "distribution",
    "group": "group",
    "tile": "tile",
    "stage": "stage",
    "transpose": "transpose",
    "copy": "copy",
    "slots": "slots",
    "interleave": "interleave",
    "lanes": "lanes",
    "split": "split",
    "passes": "passes",
}


def merge_pins(pins: tuple[tuple[str, LoopPin], ...]) -> LoopPin:
    """Several pins on one loop (``"j"`` and ``"kernel0.j"``) combine; a decision pinned to two
    values stays as the first and the solver's conflict search names both keys."""
    fields: dict = {}
    for _, pin in pins:
        for name, value in pin.items():
            fields.setdefault(name, value)
    return LoopPin(**fields)


def parse_pins(pins: Pins | MappingABC[str, Any] | None) -> Pins:
    """The user's pins as typed values; raises ArgumentError naming the bad pin."""
    if pins is None:
        return Pins()
    if isinstance(pins, Pins):
        return pins
    if not isinstance(pins, MappingABC):
        raise ArgumentError(f"pins must be a dict from loop index to pin, got {type(pins).__name__}")
    out = []
    for key, value in pins.items():
        if not isinstance(key, str) or not re.fullmatch(r"(kernel\d+\.)?[A-Za-z_]\w*", key):
            raise ArgumentError(f"pin key {key!r} is not a loop index (e.g. 'j' or 'kernel0.j')")
        pin = _pin(key, value)
        if pin.split is not None and "." in key:
            raise ArgumentError(
                f"pin '{key}': a split pin names the reduction loop alone ('{key.split('.')[1]}'), since a split "
                "renumbers the kernels"
            )
        if pin.passes is not None and "." in key:
            raise ArgumentError(
                f"pin '{key}': a passes pin names the scan's loop alone ('{key.split('.')[1]}')"
            )
        out.append((key, pin))
    return Pins(tuple(out))


def _pin(key: str, value: Any) -> LoopPin:
    if isinstance(value, LoopPin):
        return value
    if isinstance(value, (str, Axis, Distribution)):
        return _pin_from_word(key, value)
    if not isinstance(value, MappingABC):
        raise ArgumentError(f"pin for '{key}': expected a string like 'threadIdx.x' or a dict, got {value!r}")
    fields: dict[str, Any] = {}
    for name, item in value.items():
        field_name = _FIELD_ALIASES.get(name)
        if field_name is None:
            raise ArgumentError(
                f"pin for '{key}': unknown decision {name!r} (known: {', '.join(_FIELD_ALIASES)})"
            )
        fields[field_name] = _pin_value(key, field_name, item)
    return LoopPin(**fields)


def _pin_from_word(key: str, value: str | Axis | Distribution) -> LoopPin:
    if isinstance(value, Distribution):
        return LoopPin(distribution=value)
    if isinstance(value, Axis):
        return LoopPin(thread_axis=value)
    word = value.strip().lower()
    if word in ("cyclic", "blocked", "grouped"):
        return LoopPin(distribution=Distribution(word))
    match = _AXIS_TEXT.match(word)
    if match is None:
        raise ArgumentError(
            f"pin for '{key}': {value!r} is not a hardware axis (threadIdx.x, blockIdx.y, x, ...) "
            f"or a distribution (cyclic, blocked, grouped)"
        )
    axis = Axis(match.group(2))
    kind = match.group(1) or "thread"
    return LoopPin(block_axis=axis) if kind.startswith("b") else LoopPin(thread_axis=axis)


def _pin_value(key: str, name: str, value: Any) -> Any:
    if name in ("thread_axis", "block_axis"):
        if isinstance(value, Axis):
            return value
        text = str(value).lower()
        match = _AXIS_TEXT.match(text)
        if match is None:
            raise ArgumentError(f"pin for '{key}': {name} must be x, y or z, got {value!r}")
        return Axis(match.group(2))
    if name in ("stage", "transpose"):
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(b, str) for b in items):
            raise ArgumentError(
                f"pin for '{key}': {name} must be a buffer name or a list of them, got {value!r}"
            )
        return tuple(items)
    if name == "copy":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
            raise ArgumentError(
                f"pin for '{key}': copy is the most elements one load of a tile's copy moves, a power of "
                f"two (1: one element at a time), got {value!r}"
            )
        return value
    if name == "slots":
        if isinstance(value, bool) or not isinstance(value, int) or value not in (1, 2):
            raise ArgumentError(
                f"pin for '{key}': slots is the tiles a staged buffer holds at once, 1 (copy, then compute) "
                f"or 2 (double buffering: the next tile's copy in flight), got {value!r}"
            )
        return value
    if name in ("interleave", "passes"):
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in ("true", "yes", "1", "on"):
            return True
        if word in ("false", "no", "0", "off"):
            return False
        raise ArgumentError(f"pin for '{key}': {name} must be true or false, got {value!r}")
    if name == "distribution":
        try:
            return value if isinstance(value, Distribution) else Distribution(str(value).lower())
        except ValueError:
            raise ArgumentError(
                f"pin for '{key}': distribution must be cyclic, blocked or grouped, got {value!r}"
            ) from None
    if name == "lanes" and (
        not isinstance(value, int) or isinstance(value, bool) or value not in (1, *LANE_COUNTS)
    ):
        raise ArgumentError(
            f"pin for '{key}': lanes is 1 (a thread per point), 32 (a warp per point) or 64, 128, .., 1024 "
            f"(several warps per point, a block each), got {value!r}"
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
        raise ArgumentError(f"pin for '{key}': {name} must be a power of two >= 1, got {value!r}")
    return value
