"""The obligations of a kernel with lanes (``mapping/lanes.py``), beside ``prove.py``'s.

The hardware relation already puts a spread loop's iteration j on lane ``j mod lanes`` and
everything else on lane 0 (``schedule/hardware.py``), so *exactly once*, *in bounds* and
(for global buffers) *race free* are ``prove.py``'s own proofs. What lanes add:

* **shape**: the lanes are a warp, or 2 to 32 warps of a block that holds one band point
  (no band loop has threads, so every thread of the block meets each barrier of a fork or
  join), threadIdx.x holds them (no band loop on x, at most two band loops), nothing is
  staged and the points do not interleave; and every spread loop of
  the mapping is one the analysis finds (``spread_loops``) with the same accumulators,
  operators and broadcasts, so the code's fork and join do what the program says;
* **one copy of a local per lane**: a block-local buffer is a register of each thread, so
  two lanes never touch the same copy (the race proof pairs a local's accesses on one lane),
  except a *shared* array (``SpreadLoop.shared``): one copy per band point in shared
  memory, whose accesses on two lanes are paired as a global buffer's and ordered as one:
  by a fork or join between them. Its copy is reused by the point's next copy (the next
  iteration of the loop around its declaration, the thread's next point), one after the
  other as in one thread: a lane other than 0 touches it only inside a run of a spread
  loop, which the run's join closes (every lane meets it) before anything later;
* **lane order**: a dependence between two instances on different lanes of one point (one
  warp, or the block of several) is kept when its source comes first in their common order
  (every lane meets every fork and join in the same order) with a fork or join between
  them, i.e. they are not inside one run of one spread loop (one band point, one iteration
  of the loops around it: two runs have the first one's join between them); on a local
  other than a shared array, the value must
  travel with the fork or join itself: into a spread loop only as a broadcast local or an
  accumulator's start, out of it only as an accumulator, and inside one run only between
  updates of an accumulator, which the join combines (each partial once: the loop's
  instances ran exactly once, over all the lanes).
"""

from __future__ import annotations

import islpy as isl

from polymap.errors import VerificationError
from polymap.mapping.lanes import spread_loops
from polymap.mapping.proof import Obligation, Proved
from polymap.mapping.space import LANE_COUNTS, WARP_LANES, Axis, KernelMapping, SpreadLoop
from polymap.poly.deps import Dependence, DepKind
from polymap.poly.model import PolyModel
from polymap.schedule.hardware import Executed, Frame

_IN, _OUT = isl.dim_type.in_, isl.dim_type.out
WARP = WARP_LANES


def check_lane_shape(model: PolyModel, km: KernelMapping) -> None:
    """The lanes' decisions are ones the code generator can honour (see the docstring)."""
    if km.lanes == 1 and not km.spread:
        return
    name = km.kernel.name
    if km.lanes not in LANE_COUNTS or not km.spread:
        raise VerificationError(
            f"{name}: lanes must be 1, or {WARP} (a warp) or a power of two of warps up to "
            f"{LANE_COUNTS[-1]} with loops to spread; got lanes={km.lanes} and {len(km.spread)} spread loops"
        )
    if any(lm.thread_axis is Axis.X for lm in km.loops) or len(km.loops) > 2:
        raise VerificationError(f"{name}: with lanes threadIdx.x holds the lanes; the band takes y and z")
    if km.lanes > WARP and any(lm.threads > 1 for lm in km.loops):
        raise VerificationError(
            f"{name}: with {km.lanes} lanes (several warps) a block is one band point, so that every thread of "
            "the block meets the barriers of the forks and joins; no band loop may have threads in the block"
        )
    if km.staging is not None or km.interleaved:
        raise VerificationError(
            f"{name}: lanes stage nothing in shared memory and run the points one after another"
        )
    found = {sp.path: sp for sp in spread_loops(km.kernel, model, reassociate=True)}
    paths = [sp.path for sp in km.spread]
    if paths != sorted(set(paths)):
        raise VerificationError(
            f"{name}: the mapping spreads a loop twice or out of order (body positions {paths}): each "
            "spread loop has one fork and one join"
        )
    for sp in km.spread:
        if found.get(sp.path) != sp:  # its loop, statements, accumulators, broadcasts, reordering
            place = ".".join(str(p) for p in sp.path)
            raise VerificationError(
                f"{name}: loop '{sp.index}' at position {place} of the body is not spread as the mapping "
                "says: its lanes' fork and join would not compute what the loop does"
            )


def one_copy_per_lane(pairs: isl.Map, frame: Frame, buffer: str, local: bool) -> isl.Map:
    """Pairs of accesses that can meet one copy of the buffer: a local's only on one lane
    (a shared array's on any lane of its point, as a global buffer's)."""
    if frame.mapping.lanes == 1 or not local or buffer in frame.mapping.shared_locals:
        return pairs
    lane = frame.host + 3
    return pairs.equate(_IN, lane, _OUT, lane)


def across_lanes(pairs: isl.Map, frame: Frame) -> tuple[isl.Map, isl.Map]:
    """``pairs`` of hardware points split into (other lanes of one point: of its warp, or of
    its block where it has several warps; other points), one thread's pairs left out."""
    h = frame.host
    one_thread = pairs
    for dim in range(h, h + 6):
        one_thread = one_thread.equate(_IN, dim, _OUT, dim)
    if frame.mapping.lanes == 1:
        return pairs.subtract(pairs), pairs.subtract(one_thread)
    one_point = pairs  # the same block and band threads: the lanes alone differ
    for dim in (*range(h, h + 3), h + 4, h + 5):
        one_point = one_point.equate(_IN, dim, _OUT, dim)
    return one_point.subtract(one_thread), pairs.subtract(one_point)


def prove_lane_order(
    model: PolyModel, frame: Frame, dep: Dependence, e1: Executed, e2: Executed, pairs: isl.Map, error
) -> Proved:
    """A dependence's pairs on different lanes of one point are kept (see the docstring);
    ``error(pairs, what)`` is the VerificationError of a pair that is not."""
    km = frame.mapping
    name = km.kernel.name
    sp1, sp2 = km.spread_of(dep.source), km.spread_of(dep.sink)
    # a shared array is ordered as a global buffer: by a fork or join between the lanes
    local = _is_local(model, dep.buffer) and dep.buffer not in km.shared_locals
    if sp1 is not None and sp1 is sp2:
        h, n = frame.host, len(km.loops)
        one_run = pairs
        # the same point of the warp and the same iteration of the loops around the spread
        # loop (the hardware point's body dimensions before it): one run of the loop
        for dim in range(h + 6, h + 6 + n + sp1.depth):
            one_run = one_run.equate(_IN, dim, _OUT, dim)
        if not one_run.is_empty():
            if not (local and dep.buffer in dict(sp1.accumulators)):
                raise error(
                    one_run,
                    f"runs them on two lanes inside one run of loop '{sp1.index}', with no join between",
                )
            pairs = pairs.subtract(one_run)  # an accumulator's partials: the join combines them
    late = pairs.intersect(e1.time.lex_ge_map(e2.time))
    if not late.is_empty():
        raise error(late, "runs the sink on another lane no later than the source")
    if local and dep.kind is DepKind.FLOW:
        if not (_leaves(sp1, dep.buffer) and _enters(sp2, dep.buffer)):
            raise error(pairs, "passes a local's value between lanes that no fork or join carries")
    if local:
        how = "carried by a fork, join or combine"
    elif dep.buffer in km.shared_locals:
        how = "in shared memory, a fork or join between them"
    else:
        how = "a fork or join between them"
    return Proved(
        Obligation.LANE_ORDER,
        f"{dep.kind.value} {dep.source} -> {dep.sink} on {dep.buffer}",
        f"R_{dep.source} ; dep ; R_{dep.sink}^-1 on two lanes of a point: source first, {how}",
        f"{name}: {dep.kind.value} {dep.source} -> {dep.sink} on {dep.buffer} kept across lanes ({how})",
    )


def _is_local(model: PolyModel, buffer: str) -> bool:
    return any(b.is_local for b in model.buffers if b.name == buffer)


def _leaves(sp: SpreadLoop | None, buffer: str) -> bool:
    """A local's value leaves its lane: lane 0's own (outside spread loops), or an
    accumulator's, which the join combines."""
    return sp is None or buffer in dict(sp.accumulators)


def _enters(sp: SpreadLoop | None, buffer: str) -> bool:
    """A local's value reaches another lane: on lane 0 (outside spread loops), or at a
    spread loop's fork as a broadcast or an accumulator's start."""
    return sp is None or buffer in sp.broadcasts or buffer in dict(sp.accumulators)
