"""Shared-memory staging: which reads of a kernel may come from a tile in shared memory,
and the geometry of those tiles under a mapping.

The scope. A kernel stages the reads of one *scope*: either a ``seq`` loop ``L`` that is a
statement of the thread body (the tiled loop: its iterations run in tiles of ``K``), or, in
a body without such a loop, the whole body (one tile). A loop qualifies when it contains no
``par`` loop and its extent mentions neither band nor body indices, so that every thread
of a block runs the same tiles: the barriers between tiles are then met by all threads.

The schedule of a thread in a staged kernel (what ``hardware.executed`` builds and
``verify`` proves), with ``kt = floor(k / K)`` the tile of L's index ``k``::

    [0, 0, 0, s.., body order]        statements of the body before L (every s-point)
    [1, kt, 0, r, n]                  copy of staged buffer r, n-th element of this thread
    [1, kt, 0, R]                     barrier: the tile is in shared memory
    [1, kt, 1, s.., body order]       statements inside L, tile kt (every s-point)
    [1, kt, 2]                        barrier before the next tile's copy (kt + 1 < tiles)
    [2, 0, 0, s.., body order]        statements of the body after L

Running L's tiles outside the thread's s-points interchanges the loops of the body: a
block-local buffer declared in the body (an accumulator) is therefore held per s-point
(``C_acc[s_i][s_j]``); the polyhedral model already expands it by its owner loops, so the
proof sees one copy per iteration.

Candidates. A buffer ``X`` is staged for a scope when it is a program-wide buffer, no
statement of the kernel writes it, it is read in the scope, every read of it there has one
and the same index tuple, and each index ``e_d`` is ``v_d + r_d``: ``v_d`` a band index or
L's index (coefficient 1, each loop in at most one dimension) or nothing, ``r_d`` free of
loop indices but host ones and *per-block* band loops (``StageCandidate.per_block``: a
split reduction's part, ``A[i, 512 * k_part + k]``), which the model then runs one
iteration per block (T = S = 1: the index is the block's coordinate, so ``r_d`` is one
number per block). Under a mapping a block then reads, per tile, exactly the box

    lo_d <= X index d < lo_d + W_d,   lo_d = g_j T_j S_j + r_d  (v_d = band loop j, W_d = T_j S_j)
                                      lo_d = kt K + r_d         (v_d = L,           W_d = K)
                                      lo_d = r_d                (no loop,           W_d = 1)

(exactly: i_j - g_j T_j S_j runs over [0, T_j S_j) in both distributions). The tile is
copied into ``X_sh[W_0]..[W_m]``, element ``o`` of the box by thread ``o mod threads``
(row-major, so neighbouring lanes copy neighbouring elements: coalesced), and a read
``X[e]`` in the scope becomes ``X_sh[e_0 - lo_0]..``, i.e. ``X_sh[v_0 mod W_0]..``.

Layout. A *transposed* tile (a decision, ``Staging.transposed``) is stored with its last two
dimensions swapped, ``X_sh[..][W_m][W_{m-1}]``: the copy still reads global memory row by
row, and a thread whose blocked points run along loop ``v_{m-1}`` then reads them from one
row of shared memory. A thread's points read in one step (interleaved), blocked along the
loop of the row (the innermost shared dimension) and ``S >= 2`` of them, are ``S``
neighbouring elements whose first is ``S``-aligned: the compiler reads them with vector
loads of up to ``VECTOR_BYTES`` (``read_vector``), as the array is aligned and every row
keeps that alignment (``StagedBuffer.padded`` says how rows are padded against bank
conflicts, ``cost_model.bank_factor`` what conflicts are left).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polymap.ir.nodes import (
    Anchor,
    Assign,
    BufferDecl,
    Gather,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    INeg,
    IVar,
    Loop,
    Program,
    Stmt,
    index_vars,
)
from polymap.ir.walk import declared_locals, walk_block
from polymap.mapping.space import Kernel, KernelMapping
from polymap.poly.isl_text import const_value

VECTOR_BYTES = 16  # the widest load of one thread (LDS.128 / LDG.128)
# the elements a double-buffered tile's copy moves with cp.async, one or in vectors (16 bytes
# at most): a 1- or 2-byte element is stored at once (cp.async moves 4, 8 or 16 bytes)
ASYNC_ELEMENT_BYTES = (4, 8)
WIDE_ROW_BYTES = 128  # rows that keep the vector alignment at least: their padding is then at most 1/8
ROW_ELEMENTS = 8  # any tile's rows at least: one element of padding is then at most 1/8


def shared_order(items: tuple, transposed: bool) -> tuple:
    """Per-dimension ``items`` of a tile (in the buffer's order) in the order of its shared
    array: the last two swapped where the tile is stored transposed."""
    items = tuple(items)
    return items[:-2] + (items[-1], items[-2]) if transposed else items


def wide_row_log2(element_bytes: int) -> int:
    """log2 of the elements in a row of ``WIDE_ROW_BYTES`` (rows that keep the vector alignment)."""
    return max(0, math.ceil(math.log2(WIDE_ROW_BYTES / element_bytes)))


@dataclass(frozen=True, slots=True)
class StageCandidate:
    """A buffer whose reads in one scope can come from a shared-memory tile."""

    buffer: str
    loop: str | None  # the tiled seq loop's index; None: the whole thread body is the scope
    dims: tuple[str | None, ...]  # per buffer dimension: the band or tiled loop it follows, or None
    offsets: tuple[IndexExpr, ...]  # per dimension: r_d (sizes, host indices, constants)
    indices: tuple[IndexExpr, ...]  # the index tuple as written
    element_bytes: int
    reads: tuple[str, ...]  # the statements that read it in the scope
    # band loops an offset mentions (a split reduction's part: ``A[i, 512 * k_part + k]``):
    # staged only where each runs one iteration per block (T = S = 1, so it is the block's
    # coordinate and the tile's origin is the block's own)
    per_block: tuple[str, ...] = ()

    @property
    def loops(self) -> tuple[str, ...]:
        return tuple(v for v in self.dims if v is not None)

    @property
    def transposable(self) -> bool:
        """Whether storing the tile transposed can help: its second-to-last dimension follows
        a band loop, whose blocked points would then lie along a row of shared memory."""
        return len(self.dims) >= 2 and self.dims[-2] is not None and self.dims[-2] != self.loop

    def row_loop(self, transposed: bool) -> str | None:
        """The loop the innermost dimension of the shared tile follows."""
        return shared_order(self.dims, transposed)[-1]

    def serves(self, statement: str, buffer: str, is_write: bool) -> bool:
        """Whether this staging serves an access: a read of the buffer by a statement of the scope."""
        return buffer == self.buffer and statement in self.reads and not is_write


@dataclass(frozen=True, slots=True)
class StagedBuffer:
    """A staged buffer under a mapping: its tile's widths (``W_d``) and shared array."""

    candidate: StageCandidate
    widths: tuple[int, ...]  # per dimension: T_j S_j, K or 1 (also the modulus of its shared index)
    transposed: bool = False  # stored with the last two dimensions swapped
    vector: int = 1  # elements a thread reads from a row in one load (``read_vector``)
    copy: int = 1  # elements one load of the copy moves (``Staging.copy_vectors``)
    slots: int = 1  # tiles held at once (``Staging.slots``): the shared array's leading extent

    @property
    def name(self) -> str:
        return self.candidate.buffer

    def in_shared_order(self, items: tuple) -> tuple:
        """Per-dimension ``items`` (in the buffer's order) in the shared array's order."""
        return shared_order(items, self.transposed)

    @property
    def alignment(self) -> int:
        """The bytes the shared array is aligned to: a vector load's, which every row keeps."""
        return VECTOR_BYTES

    @property
    def aligned_rows(self) -> bool:
        """Whether the rows keep the vector alignment (a transposed tile, or rows read in
        vectors): they are then an odd number of 16-byte chunks, else of elements."""
        return self.transposed or self.vector > 1

    @property
    def chunk(self) -> int:
        """Elements in 16 bytes (a vector load's width)."""
        return max(1, VECTOR_BYTES // self.candidate.element_bytes)

    @property
    def padded(self) -> tuple[int, ...]:
        """The shared array's extents: the rows padded to an odd number of 16-byte chunks
        where they keep the vector alignment (``aligned_rows``), else to an odd number of
        elements. Lanes walking down a column then spread over the banks as far as the
        alignment allows (``cost_model.bank_factor``), and a transposed tile's copy stores
        meet at most 4 words per bank (``cost_model.transposed_store_wavefronts``). The
        model keeps rows at least 8 elements wide (128 bytes where aligned), so that the
        padding stays within ``cost_model.PADDING``."""
        shape = self.in_shared_order(self.widths)
        if len(shape) == 1:
            return shape
        unit = self.chunk if self.aligned_rows else 1
        units = -(-shape[-1] // unit)
        units += 1 - units % 2
        return shape[:-1] + (units * unit,)

    @property
    def stores_vectors(self) -> bool:
        """Whether a copied vector goes into shared memory in one store: its elements are
        neighbours in a row (not transposed) and every row keeps the vector's alignment."""
        return self.copy > 1 and not self.transposed and self.padded[-1] % self.copy == 0

    @property
    def elements(self) -> int:
        return math.prod(self.widths)

    @property
    def bytes(self) -> int:
        return self.slots * math.prod(self.padded) * self.candidate.element_bytes


def scope_loops(kernel: Kernel) -> tuple[Loop, ...]:
    """The seq loops of a kernel's thread body that can be tiled (see the module docstring)."""
    if kernel.is_serial:
        return ()
    band = set(kernel.indices)
    # a staging names its loop by index: two loops of the body with one index are left out
    names = [s.index for s in walk_block(kernel.body) if isinstance(s, Loop)]
    found = []
    for stmt in kernel.body:
        if (
            isinstance(stmt, Loop)
            and not stmt.is_par
            and not _has_par(stmt)
            and names.count(stmt.index) == 1
            and not (index_vars(stmt.extent) & band)
        ):
            found.append(stmt)
    return tuple(found)


def stage_candidates(kernel: Kernel, program: Program) -> tuple[StageCandidate, ...]:
    """Every (buffer, scope) pair that can be staged, in a deterministic order: for each
    tiled-loop scope its buffers by first read, then the whole-body scope's when the body
    has no tiled-loop scope."""
    if kernel.is_serial:
        return ()
    written = {s.buffer for s in _statements(kernel.body) if isinstance(s, Assign)}
    local = {decl.name for decl in declared_locals(kernel.body)}
    host = {loop.index for loop in kernel.host_loops}
    out = []
    loops = scope_loops(kernel)
    scopes: list[tuple[Loop | None, tuple[Stmt, ...]]] = [(loop, loop.body) for loop in loops]
    if not loops:
        scopes.append((None, kernel.body))
    for loop, block in scopes:
        free = set(kernel.indices) | ({loop.index} if loop is not None else set())
        reads: dict[str, list] = {}
        for stmt in _statements(block):
            for read in stmt.reads():
                reads.setdefault(read.buffer, []).append((stmt.name, read.indices))
        for buffer, uses in reads.items():
            if buffer in written or buffer in local:
                continue
            candidate = _candidate(program, buffer, loop, uses, free, host)
            if candidate is not None:
                out.append(candidate)
    return tuple(out)


def _candidate(program: Program, buffer: str, loop: Loop | None, uses, free: set[str], host: set[str]):
    indices = uses[0][1]
    if not indices or any(u[1] != indices for u in uses):
        return None
    if any(isinstance(e, Gather) for e in indices):
        return None  # a gathered row is known only at run time: no tile to copy ahead
    dims, offsets = [], []
    band = free - ({loop.index} if loop is not None else set())
    for e in indices:
        split = split_index(e, free - band) if loop is not None else None
        if split is None or (split[0] is None and index_vars(e) & free):
            split = split_index(e, free)
        if split is None:
            return None
        var, rest = split
        if index_vars(rest) - host - set(program.param_names) - band:
            return None
        if var is not None and var in dims:
            return None
        dims.append(var)
        offsets.append(rest)
    per_block = tuple(sorted(set().union(*(index_vars(r) for r in offsets)) & band))
    if set(per_block) & set(dims):
        return None  # a loop both along a dimension and in another's origin
    if dims[-1] is None:  # a row of the tile must run along a loop to be copied coalesced
        return None
    if loop is not None and loop.index not in dims:
        return None  # the same tile every iteration: nothing to gain from tiling the loop
    decl = program.buffer(buffer)
    reading = tuple(dict.fromkeys(name for name, _ in uses))
    return StageCandidate(
        buffer,
        loop.index if loop is not None else None,
        tuple(dims),
        tuple(offsets),
        indices,
        decl.dtype.itemsize,
        reading,
        per_block,
    )


def split_index(e: IndexExpr, free: set[str]) -> tuple[str | None, IndexExpr] | None:
    """``e`` as ``v + r`` with ``v`` in ``free`` (coefficient 1) or absent and ``r`` free of
    ``free``; None when ``e`` has another form (a coefficient, two loops, a division)."""
    if not (index_vars(e) & free):
        return None, e
    if isinstance(e, IVar):
        return e.name, IConst(0)
    if isinstance(e, IBin) and e.op in (IndexOp.ADD, IndexOp.SUB):
        left, right = split_index(e.lhs, free), split_index(e.rhs, free)
        if left is None or right is None:
            return None
        if e.op is IndexOp.SUB:
            if right[0] is not None:
                return None  # -v: a coefficient of -1
            return left[0], IBin(IndexOp.SUB, left[1], right[1])
        if left[0] is not None and right[0] is not None:
            return None
        return left[0] or right[0], IBin(IndexOp.ADD, left[1], right[1])
    if isinstance(e, INeg):
        return None
    return None


def tile_span(km: KernelMapping, index: str | None) -> int:
    """The width a loop gives a tile: T S for a band loop, K for the tiled loop, 1 for none."""
    if index is None:
        return 1
    staging = km.staging
    if staging is not None and index == staging.loop:
        return staging.tile
    lm = km.loop(index)
    return lm.threads * lm.seq


def staged_buffers(km: KernelMapping, program: Program) -> tuple[StagedBuffer, ...]:
    """The staged buffers of a mapped kernel, in the order of ``Staging.buffers``."""
    staging = km.staging
    if staging is None:
        return ()
    by_name = {c.buffer: c for c in stage_candidates(km.kernel, program) if c.loop == staging.loop}
    return tuple(staged_buffer(km, by_name[name]) for name in staging.buffers)


def staged_buffer(km: KernelMapping, c: StageCandidate) -> StagedBuffer:
    """One staged candidate under a mapping: its widths, layout, read and copy widths."""
    transposed = km.staging is not None and c.buffer in km.staging.transposed
    copy = km.staging.copy_vector(c.buffer) if km.staging is not None else 1
    spans = tuple(tile_span(km, v) for v in c.dims)
    slots = km.staging.slots if km.staging is not None else 1
    return StagedBuffer(c, spans, transposed, read_vector(km, c, transposed), copy, slots)


def copy_vector(c: StageCandidate, program: Program, limit: int | None = None) -> int:
    """The widest copy a candidate's tile allows whatever the mapping: a power of two of at
    most ``VECTOR_BYTES`` of elements that divides the offset of the tile's rows (``r`` of
    the last index, a constant) and the buffer's row length where that is a constant. A
    group of that many neighbours of a row then starts at an index that is a multiple of
    its width (the tile's origin in the row, ``T S g + r`` or ``K kt + r``, is one where the
    tile's row is a multiple of it: ``StagedBuffer.widths``, at least 32 bytes under every
    mapping the solver makes), and so, in a row of a multiple of it, at an aligned address.
    Where the row length is a size, the emitted kernel tests it (and the pointer's
    alignment) at run time and copies one element at a time when the test fails. ``limit``:
    at most that many (a ``copy`` pin)."""
    widest = min(max(1, VECTOR_BYTES // c.element_bytes), limit or VECTOR_BYTES)
    offset = const_value(c.offsets[-1])
    if offset is None:
        return 1
    row = const_value(program.buffer(c.buffer).shape[-1])
    for value in (offset, row):
        if value is not None and value != 0:
            widest = min(widest, abs(value) & -abs(value))
    return widest


def copy_vectors(km: KernelMapping, program: Program, widest=None) -> tuple[tuple[str, int], ...]:
    """``Staging.copy_vectors`` for a mapping: each staged buffer's ``copy_vector`` (or
    ``widest(candidate)``), at most the largest power of two that divides its tile's row."""
    out = []
    for sb in staged_buffers(km, program):
        row = sb.widths[-1]
        allowed = widest(sb.candidate) if widest is not None else copy_vector(sb.candidate, program)
        width = min(allowed, row & -row)
        if width > 1:
            out.append((sb.name, width))
    return tuple(out)


def read_vector(km: KernelMapping, c: StageCandidate, transposed: bool) -> int:
    """How many of a thread's points one load of the tile serves along its rows: the
    loop's step ``V`` (``LoopMapping.step``: ``S`` where blocked, the group where grouped, 1
    where cyclic), at most ``VECTOR_BYTES`` of elements, where the points interleave along
    the loop of the rows, and the rows are at least ``WIDE_ROW_BYTES`` (so that their
    padding stays small): a step then reads groups of ``V`` neighbouring elements, each
    ``V``-aligned (``i - g T S = (s div V) T V + t V + s mod V``); else 1."""
    loop = c.row_loop(transposed)
    if not km.interleaved or loop is None or loop == c.loop:
        return 1
    lm = km.loop(loop)
    if lm.threads * lm.seq * c.element_bytes < WIDE_ROW_BYTES:
        return 1
    return max(1, min(lm.step, VECTOR_BYTES // c.element_bytes))


def copy_caps(kernel: Kernel, program: Program) -> tuple[tuple[tuple[str, str | None], int], ...]:
    """``copy_vector`` of every candidate of a kernel of the program as written, by (buffer,
    tiled loop): the solver maps the program with its sizes bound to the cost sizes, where
    an offset ``j + N`` reads as a constant; the code is made for the program as written,
    where it is a size, so the copies may be no wider than this there."""
    return tuple(((c.buffer, c.loop), copy_vector(c, program)) for c in stage_candidates(kernel, program))


def scope_position(km: KernelMapping) -> int | None:
    """The position of the tiled loop in the thread body (None: the whole body is one phase)."""
    loop = tiled_loop(km)
    return None if loop is None else km.kernel.body.index(loop)


def tiled_loop(km: KernelMapping) -> Loop | None:
    """The seq loop a staged kernel tiles (None: no staging, or the whole body is the tile)."""
    staging = km.staging
    if staging is None or staging.loop is None:
        return None
    return next(s for s in km.kernel.body if isinstance(s, Loop) and s.index == staging.loop)


def per_point_locals(kernel: Kernel, loop: str) -> list[BufferDecl]:
    """The block-local buffers a thread must hold once per s-point when ``loop`` is tiled:
    those declared in the body outside it, whose lifetimes now span the tiles."""
    return declared_locals(tuple(s for s in kernel.body if not (isinstance(s, Loop) and s.index == loop)))


def _has_par(loop: Loop) -> bool:
    return any(isinstance(s, Loop) and (s.is_par or _has_par(s)) for s in loop.body)


def _statements(block: tuple[Stmt, ...]) -> list[Assign | Anchor]:
    return [s for s in walk_block(block) if isinstance(s, (Assign, Anchor))]
