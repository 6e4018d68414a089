"""Buffers a kernel reads from the L2 cache: those small enough to stay there.

A buffer the kernel only reads, whose elements it reads (all its accesses together, one
launch) fit in half of the L2 (``CACHED_SHARE``: the other half for the data the kernel
streams past them), comes from DRAM once; every read after that is served by the caches.
gemv's ``x`` is the example: each row reads all of it, so a warp per row reads it 8192
times, and a model that charges each of those reads to DRAM (as the model did) predicts
half the bandwidth the kernel gets. The DRAM roof then counts the buffer's footprint once,
and its reads go to the caches' roof (``GpuTarget.cache_bandwidth``), which every byte of
global traffic passes through (``KernelProblem.cost``, ``ScipModel._time``).

Which buffers qualify does not depend on the mapping: the footprint is the elements read,
counted by isl on the bound model, whatever thread reads them. A larger buffer qualifies
where only band points near each other read an element (a stencil's neighbours:
``window_footprints``). Other buffers are charged every read, as before: whether a re-read
of one hits depends on what else the GPU touches in between, which the model does not
follow (docs/calibration.md: the missing L2 roof of the ladder's lower steps).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import islpy as isl

from polymap.ir.nodes import Anchor, Assign, BufferDecl
from polymap.ir.walk import walk_block
from polymap.mapping.accesses import kernel_statements
from polymap.mapping.space import Kernel
from polymap.poly.isl_text import const_value
from polymap.poly.model import Access, PolyModel, StatementModel
from polymap.targets import GpuTarget

CACHED_SHARE = 0.5  # of the L2: the most a buffer's footprint may take and count as cached
# the most elements of the box around what a band point's sibling accesses read, per element
# they read (``window_footprints``): the box then costs at most twice what they need
SIBLING_DENSITY = 2


def cached_footprints(kernel: Kernel, model: PolyModel, target: GpuTarget) -> tuple[tuple[str, int], ...]:
    """(buffer, bytes) per global buffer ``kernel`` reads and never writes whose elements
    read fit in ``CACHED_SHARE`` of the L2, in the order the kernel first reads them.
    ``model`` is of the bound program; a kernel inside host loops is counted over all its
    launches together, at least one launch's footprint, and charged that per launch."""
    written: set[str] = set()
    read: dict[str, isl.Set] = {}
    for stmt, accesses in _global_accesses(kernel, model):
        written.update(a.buffer for a in accesses if a.is_write)
        for access in (a for a in accesses if not a.is_write):
            elements = access.relation.intersect_domain(stmt.domain).range()
            read[access.buffer] = read[access.buffer].union(elements) if access.buffer in read else elements
    found = []
    share = CACHED_SHARE * target.l2_cache_bytes
    for buffer, elements in read.items():
        decl = model.program.buffer(buffer)
        # counted only where the buffer, or the box around the elements read, fits the
        # share: isl's count scans the set row by row (a folded band's took minutes)
        if buffer in written or min(declared_bytes(decl), _box_bytes(elements, decl)) > share:
            continue
        size = elements.count_val().to_python() * decl.dtype.itemsize
        if 0 < size <= share:
            found.append((buffer, size))
    return tuple(found)


def window_footprints(
    kernel: Kernel, model: PolyModel, target: GpuTarget, skip: frozenset[str] = frozenset()
) -> tuple[tuple[str, int], ...]:
    """(buffer, bytes) per global buffer ``kernel`` reads and never writes (and not in
    ``skip``: those ``cached_footprints`` found) whose elements only band points near each
    other read: a stencil's ``A[i + 1, j]`` beside ``A[i, j + 1]``, a 1-D convolution's
    ``x[i + t]``. The L2 holds an element from its first read to its last, so DRAM moves
    the buffer once, where the *window* between them fits ``CACHED_SHARE`` of the L2.

    The band points that read one element, as isl finds them on the bound model (each
    access's elements per band point, ``R``; the pairs ``R . R^-1``), differ by at most
    ``d_k`` along band loop ``k`` (the pairs' deltas; unbounded or the loop's whole extent
    for a GEMM's operand, which every point of a row reads). Whatever the mapping's order of
    blocks, the GPU runs the band points a loop's ``d_k`` steps apart within ``d_k / N_k`` of
    the kernel, which touches at most the declared bytes of its buffers (``point_bytes``):
    the window is at most ``sum_k d_k / N_k`` of those, and the band points in flight hold
    their own share besides (a point per resident thread at most, each the kernel's bytes
    over its band points: two rows that neighbouring points each walk in a long ``seq`` loop
    at different times do not fit). Where no two band points read one
    element but a band point reads the buffer through two accesses or more (a 2x2 pool's
    ``X[2 i, 2 j]`` beside ``X[2 i, 2 j + 1]``), the sectors one access leaves half used the
    others use, the window is nothing, and the buffer counts where its box is dense enough
    (``_dense_siblings``: ``X[64 i]`` beside ``X[64 i + 1]`` is not). Kernels inside host
    loops and buffers read through a gather (elements known only from the data) are left
    out. The footprint is the box around the
    elements read (``_box_bytes``: an upper bound, without isl's count)."""
    if kernel.is_serial or kernel.host_loops:
        return ()
    outer = len(kernel.band)
    written: set[str] = set()
    gathered: set[str] = set()
    per_point: dict[str, isl.Map] = {}
    texts: dict[str, set[str]] = {}  # each buffer's distinct accesses
    for stmt, accesses in _global_accesses(kernel, model):
        written.update(a.buffer for a in accesses if a.is_write)
        for access in (a for a in accesses if not a.is_write):
            if access.gathered:
                gathered.add(access.buffer)
                continue
            here = _per_band_point(access, stmt, outer)
            per_point[access.buffer] = (
                per_point[access.buffer].union(here) if access.buffer in per_point else here
            )
            texts.setdefault(access.buffer, set()).add(access.text)
    touched = point_bytes(kernel, model, 1)  # every buffer's declared bytes: the kernel's at most
    share = CACHED_SHARE * target.l2_cache_bytes
    found = []
    for buffer, reads in per_point.items():
        if buffer in written or buffer in gathered or buffer in skip:
            continue
        window = _window_share(reads)
        if window is None:
            continue
        # every band point in flight holds its own bytes while it runs (a long seq loop
        # re-reading a row its neighbour reads at another time): a point per resident
        # thread at most, the most there can be (``in_flight_fits`` with one lane)
        points = _box_elements(reads.domain())  # the band points that read the buffer
        in_flight = min(points, target.sm_count * target.max_threads_per_sm) * touched / points
        if window * touched + in_flight > share:
            continue
        decl = model.program.buffer(buffer)
        box = _box_elements(reads.range())
        if window == 0 and not _dense_siblings(len(texts[buffer]), box / points, decl, target):
            continue  # siblings, a band point's accesses sharing sectors: only where dense
        size = min(declared_bytes(decl), box * decl.dtype.itemsize)
        if 0 < size < math.inf:
            found.append((buffer, int(size)))
    return tuple(found)


def _dense_siblings(accesses: int, box_per_point: float, decl: BufferDecl, target: GpuTarget) -> bool:
    """Whether a band point's ``accesses`` (two or more) of a buffer no two band points
    share read enough of the box around them (``box_per_point`` elements of it per band
    point) for the box to stand for the sectors DRAM moves: at most ``SIBLING_DENSITY``
    elements of it per element read, or a sector's bytes per band point (a record of 8
    floats of which a point reads 3: any access of the point moves that sector anyway)."""
    if accesses < 2:
        return False
    per_point = box_per_point * decl.dtype.itemsize
    return per_point <= max(SIBLING_DENSITY * accesses * decl.dtype.itemsize, target.sector_bytes)


def _window_share(reads: isl.Map) -> float | None:
    """``sum_k d_k / N_k`` of ``window_footprints`` for the elements each band point reads
    (``reads``): 0 where no two band points read one element, None where the distance
    along a loop is unbounded."""
    points = reads.domain()
    pairs = reads.apply_range(reads.reverse())
    deltas = pairs.deltas()
    share, apart = 0.0, False
    for k in range(deltas.dim(isl.dim_type.set)):
        low, high = deltas.dim_min_val(k), deltas.dim_max_val(k)
        first, last = points.dim_min_val(k), points.dim_max_val(k)
        if not all(v.is_int() for v in (low, high, first, last)):
            return None
        distance = max(abs(low.to_python()), abs(high.to_python()))
        apart = apart or distance > 0
        share += distance / (last.to_python() - first.to_python() + 1)
    return share if apart else 0.0


# -- what a band point touched before

FIRST, AGAIN, ADJACENT = "first", "again", "adjacent"


def touched_before(kernel: Kernel, model: PolyModel) -> dict[tuple[str, str, bool], str]:
    """Per global access of ``kernel`` (statement, text, is a write): whether the band point
    that makes it touched its elements before, so that the caches serve it (a read) or
    merge it with the write before (a write):

    * ``ADJACENT``: a statement before it in the same loops touched the same element in
      the same iteration (a read of ``Y[i, j]`` right after ``Y[i, j] = ...``): it is in
      L1 or L2 whatever the mapping;
    * ``AGAIN``: earlier items of the body (an earlier loop or statement of the band
      point) touched every element it touches at that point (softmax's second and third
      passes over its row): in L2 where what the band points in flight touch fits there
      (``KernelProblem.reuse_fits``, which depends on the lanes);
    * ``FIRST``: anything else.

    A write counts as touched before only by a write (the earlier one is charged the DRAM
    write-back; a write after a read must still go to DRAM). Exact by isl, on the bound
    model: per band point for ``AGAIN`` (the statement's loops below the band projected
    out), per iteration for ``ADJACENT``."""
    items = {}
    for position, item in enumerate(kernel.body):
        for stmt in walk_block((item,)):
            if isinstance(stmt, (Assign, Anchor)):
                items[stmt.name] = position
    outer = len(kernel.host_loops) + len(kernel.band)
    seen: list[tuple[StatementModel, Access, isl.Map]] = []  # every access so far, per band point
    found = {}
    for stmt, accesses in _global_accesses(kernel, model):
        here = []
        for access in accesses:
            if access.gathered:
                continue  # elements known only from the data
            per_point = _per_band_point(access, stmt, outer)
            kind = FIRST
            earlier = [
                (s, a, m)
                for s, a, m in seen
                if a.buffer == access.buffer and (a.is_write or not access.is_write)
            ]
            if any(_same_iteration(a, s, access, stmt) for s, a, _ in earlier if s.loops == stmt.loops):
                kind = ADJACENT
            else:
                before = [m for s, _, m in earlier if items[s.name] < items[stmt.name]]
                if before and per_point.is_subset(_union(before)):
                    kind = AGAIN
            found[stmt.name, access.text, access.is_write] = kind
            here.append((stmt, access, per_point))
        seen += here
    return found


def point_bytes(kernel: Kernel, model: PolyModel, points: int) -> float:
    """The bytes one band point holds in the caches while it runs, at most: the declared
    bytes of every global buffer the kernel touches over its band points (``points``, a
    launch's). An upper bound, not a count (isl's ``count_val`` scans a set row by row, and
    a folded band's quasi-affine sets took minutes): a kernel that touches a slice of a
    buffer is taken to hold all of it, and its band points' re-reads fit less often."""
    touched = {access.buffer for _, accesses in _global_accesses(kernel, model) for access in accesses}
    return sum(declared_bytes(model.program.buffer(b)) for b in sorted(touched)) / max(1, points)


def _global_accesses(kernel: Kernel, model: PolyModel) -> Iterator[tuple[StatementModel, tuple[Access, ...]]]:
    """Each statement of ``kernel`` in its order, with its accesses to global memory: not
    to a block-local buffer (registers) nor to an in scalar (a kernel parameter)."""
    order = {s.name: k for k, s in enumerate(kernel_statements(kernel))}
    local = {b.name for b in model.buffers if b.is_local}
    for stmt in sorted((s for s in model.statements if s.name in order), key=lambda s: order[s.name]):
        yield (
            stmt,
            tuple(
                a
                for a in stmt.accesses
                if a.buffer not in local and not model.program.buffer(a.buffer).by_value
            ),
        )


def declared_bytes(decl: BufferDecl) -> float:
    """A buffer's bytes at the bound sizes (infinite where a dimension is not a constant)."""
    count = 1
    for extent in decl.shape:
        value = const_value(extent)
        if value is None:
            return math.inf
        count *= max(0, value)
    return count * decl.dtype.itemsize


def _box_bytes(elements: isl.Set, decl: BufferDecl) -> float:
    """The bytes of the smallest box around ``elements`` (a bound sizes' set): at least the
    bytes of the elements, computed by isl per dimension without counting them."""
    return _box_elements(elements) * decl.dtype.itemsize


def _box_elements(elements: isl.Set) -> float:
    """The points of the smallest box around ``elements`` (infinite where unbounded)."""
    count = 1
    for k in range(elements.dim(isl.dim_type.set)):
        low, high = elements.dim_min_val(k), elements.dim_max_val(k)
        if not (low.is_int() and high.is_int()):
            return math.inf  # unbounded (a may-read's dimension): no box
        count *= high.to_python() - low.to_python() + 1
    return count


def _per_band_point(access: Access, stmt: StatementModel, outer: int) -> isl.Map:
    """The elements ``access`` touches at each band point (host and band indices), the
    statement's own loops projected out; its domain tuple renamed so that statements compare."""
    relation = access.relation.intersect_domain(stmt.domain)
    inner = relation.dim(isl.dim_type.in_) - outer
    return relation.project_out(isl.dim_type.in_, outer, inner).set_tuple_name(isl.dim_type.in_, "point")


def _same_iteration(
    earlier: Access, earlier_stmt: StatementModel, access: Access, stmt: StatementModel
) -> bool:
    """Whether every instance of ``access`` touches the element ``earlier`` touched in the same
    iteration (the two statements in the same loops, ``earlier`` first)."""
    mine = access.relation.intersect_domain(stmt.domain).set_tuple_name(isl.dim_type.in_, "it")
    theirs = earlier.relation.intersect_domain(earlier_stmt.domain).set_tuple_name(isl.dim_type.in_, "it")
    return mine.is_subset(theirs)


def _union(maps: list[isl.Map]) -> isl.Map:
    out = maps[0]
    for m in maps[1:]:
        out = out.union(m)
    return out


def in_flight_fits(target: GpuTarget, point_bytes: float, points: int, lanes: int) -> bool:
    """Whether the band points in flight at once touch at most ``CACHED_SHARE`` of the L2:
    as many as the GPU's resident threads hold, a band point per thread or per ``lanes``
    threads (a warp or a block per point), at most all ``points``. A band point's re-reads
    (``AGAIN``) then find what it touched still there (write-back: its writes too)."""
    resident = target.sm_count * target.max_threads_per_sm // max(1, lanes)
    return min(points, resident) * point_bytes <= CACHED_SHARE * target.l2_cache_bytes
