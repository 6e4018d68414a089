"""The cost model's formulas and limits, shared by the SCIP model (``scip_model.py``), which
optimizes them, and ``KernelProblem.cost`` (``solve.py``), which evaluates them for concrete
decisions: the report's cost is the cost SCIP optimized because both read them from here."""

from __future__ import annotations

import itertools
import math

from polymap.ir.nodes import Loop, index_vars
from polymap.ir.walk import walk_block
from polymap.mapping.accesses import GlobalAccess
from polymap.mapping.space import Axis, Kernel, KernelMapping, SpreadLoop
from polymap.mapping.staging import StagedBuffer
from polymap.targets import GpuTarget

MAX_LOG_SEQ = 4  # 16 points per loop and thread
MAX_LOG_SEQ_TOTAL = 6  # 64 points per thread (accumulators must fit in registers)
MAX_LOG_TILE = 6  # a tiled seq loop runs at most 64 iterations per tile
PADDING = 9 / 8  # a staged tile's rows may be padded by 16 bytes in 128 (``StagedBuffer.padded``)
TRANSPOSED_STORE_WAVEFRONTS = 4  # a warp's store into a transposed tile (``transposed_store_wavefronts``)
TIE_BREAK = 1e-6  # microseconds: never outweighs a real cost difference
# The model's register estimate (``KernelProblem.registers``), a limit on the mapping, not a
# cost: a thread's accumulators and fragments (counted from the decisions) plus what it holds
# whatever they are. Those constants are fitted to ptxas's counts for the kernels of models/
# (docs/benchmarks/2026-11-29-register-estimate.md): its ids, guard and a loop counter;
REGISTERS_THREAD = 5
REGISTERS_PER_BUFFER = 3  # per global buffer it reads or writes: a 64-bit address and an index
REGISTERS_LANES = 15  # with lanes: the lane's id, its partial values, shuffles, the spread loops
REGISTERS_PER_STAGED = 11  # per staged tile: its copy's global and shared addresses and counters
# a step of a loop of the thread body, beyond its FMAs and loads: counter, compare, branch,
# address updates. The most the hot loops of the models' register-tiled GEMMs spend, per
# step of their k loop, on instructions that are neither an FMA nor a shared load (5 to 11:
# docs/benchmarks/2026-11-24-vector-copies.md), so that no GEMM's issue time is below its
# hot loop's own count
LOOP_STEP_INSTRUCTIONS = 11
# a step of fewer FMAs than this the compiler unrolls until a copy of the loop's body has
# about this many (the SGEMM ladder's steps: 1 point a step, 16 FMAs in the hot loop; 8
# points, 32): the loop's own instructions are then shared by that many points
LOOP_UNROLL_POINTS = 16


def shared_wavefronts(target: GpuTarget, element_bytes: int) -> int:
    """Wavefronts (clocks of an SM's shared memory) one warp's access of ``element_bytes``
    elements takes without bank conflicts: 1 for 32-bit elements, 2 for 64-bit. A read's
    conflicts multiply it (``bank_factor``)."""
    return max(1, -(-target.warp_size * element_bytes // target.shared_memory_bytes_per_clock))


def tile_store_wavefronts(target: GpuTarget, moved_bytes, element_bytes: int):
    """Wavefronts of the stores that put ``moved_bytes`` of copied tiles into shared memory:
    a warp stores 32 elements per instruction."""
    return moved_bytes / (element_bytes * target.warp_size) * shared_wavefronts(target, element_bytes)


def transposed_store_wavefronts(target: GpuTarget, moved_bytes, element_bytes: int):
    """Wavefronts of the stores into a transposed tile: the copy's lanes run along the
    buffer's rows, which are the tile's columns, so a warp's store meets bank conflicts. Rows
    of an odd number of 16-byte chunks (``StagedBuffer.padded``) keep it within 4 words per
    bank for 4- and 8-byte elements (every tile width and tile; the simulation is in
    tests/test_layout.py), which is what it is charged."""
    return moved_bytes / (element_bytes * target.warp_size) * TRANSPOSED_STORE_WAVEFRONTS


def arithmetic_instructions(target: GpuTarget, instructions: int) -> float:
    """Warp instructions of ``instructions`` arithmetic instructions of the threads
    (``KernelProblem.arithmetic``: an FMA where a multiplication feeds an addition, a
    conversion where an integer enters a float operation), a warp's lanes at once."""
    return instructions / target.warp_size


def loop_step_instructions(target: GpuTarget, iterations: int, points_per_step: int) -> float:
    """Warp instructions of the loops' own work: ``iterations`` is the count of the
    innermost loops' iterations over all points (``KernelProblem.loop_iterations``), a
    warp runs 32 points at once, and where a thread's points interleave one step serves
    ``points_per_step`` of them; fewer than ``LOOP_UNROLL_POINTS`` share the loop's
    instructions with the steps the compiler unrolls with theirs."""
    shared_by = max(points_per_step, LOOP_UNROLL_POINTS)
    return LOOP_STEP_INSTRUCTIONS * -(-iterations // target.warp_size) / shared_by


def copy_instructions(target: GpuTarget, moved_bytes, element_bytes: int, vector: int = 1):
    """Warp instructions of a tile copy of ``moved_bytes``: a global load per 32 vectors of
    ``vector`` elements (``StagedBuffer.copy``) and a shared store per 32 elements. Where the
    rows keep the vector's alignment a vector goes into shared memory in one store
    (``StagedBuffer.stores_vectors``); that depends on decisions the SCIP model does not
    relate to the copy (the layout, the read width), so the stores are charged per element
    there too: a bound, the same in the model and in the evaluated cost."""
    return moved_bytes / (element_bytes * target.warp_size) * (1 + 1 / vector)


def issue_rate(target: GpuTarget) -> float:
    """Warp instructions the whole GPU issues per second (``GpuTarget.warp_instructions_per_second``)."""
    return target.warp_instructions_per_second


def shared_wavefront_rate(target: GpuTarget) -> float:
    """Shared-memory wavefronts the whole GPU serves per second."""
    per_clock = target.shared_memory_bytes_per_clock / (target.warp_size * 4)
    return target.sm_count * target.clock_hz * per_clock


def interleavable(kernel: Kernel) -> bool:
    """Whether the order of a thread's points is a decision: where the body has a loop. Without
    one, either order runs each point's statements once, unrolled and independent, so the
    code does the same work either way; the points then run one after another."""
    return any(isinstance(s, Loop) for s in walk_block(kernel.body))


def mentioned_loops(access: GlobalAccess, band: tuple[str, ...]) -> tuple[str, ...]:
    """The band loops the indices of ``access`` mention."""
    used = set()
    for e in access.indices:
        used |= index_vars(e)
    return tuple(index for index in band if index in used)


def reuse_loops(access: GlobalAccess, band: tuple[str, ...]) -> tuple[str, ...]:
    """The band loops whose points all read the same element of ``access`` in one step: those
    its indices do not mention. Where a thread's points interleave (``KernelMapping``), one
    read of the element serves them all (the compiler keeps the value in a register)."""
    mentioned = mentioned_loops(access, band)
    return tuple(index for index in band if index not in mentioned)


def shared_read_cost(
    target: GpuTarget, access: GlobalAccess, mapping: KernelMapping, tile: StagedBuffer, requests: int
) -> tuple[float, float, float]:
    """A staged read's shared-memory loads, wavefronts and reads, in warp reads of one value (times
    ``shared_wavefronts`` for the wavefronts; ``ScipModel._staged_reads`` is the same in the
    solver's terms). Reads: one per warp request, divided by the points that share a value
    where they interleave (``point_reuse``). Loads: the reads divided by the points one vector
    load serves (``tile.vector``). Wavefronts: one per load when no loop the read mentions is
    on x (a broadcast); else ``max(1, bank_factor / vector)`` per read; and where the warp
    wraps into y, at least one per read (the bank factor does not count the rows of such a
    warp)."""
    reads = requests / (point_reuse(access, mapping) if mapping.interleaved else 1)
    loads = reads / tile.vector
    x_loop = next((m for m in mapping.loops if m.thread_axis is Axis.X), None)
    # a warp that wraps into y (fewer than 32 threads on x) reads a row per y thread: charged
    # a wavefront per read at least, an upper bound
    least = reads if x_loop is None or x_loop.threads < target.warp_size else loads
    if x_loop is None or x_loop.index not in mentioned_loops(access, mapping.kernel.indices):
        return loads, least, reads
    return loads, max(least, reads * max(1.0, bank_factor(target, tile, x_loop) / tile.vector)), reads


def bank_factor(target: GpuTarget, tile: StagedBuffer, x_loop) -> int:
    """How many times a conflict-free read's wavefronts a warp's scalar read of the tile
    takes when its lanes run along ``x_loop`` (``StagedBuffer.padded`` sets the strides),
    with ``delta`` the lanes' step in that loop (``LoopMapping.step``: 1 if cyclic, the group
    if grouped, ``S`` if blocked):

    * along the rows: ``delta`` (lanes ``delta`` elements apart share ``delta`` times fewer banks);
    * down a column: ``delta`` times 16 bytes of elements where the rows keep the vector
      alignment (rows an odd number of 16-byte chunks), ``delta`` where they are an odd number
      of elements;
    * along a dimension further out: the most there can be, every lane in one bank (an
      upper bound: with rows an odd number of elements it is ``delta`` times the widths
      between, which the model does not count);

    at most that most (32 words per bank; 16 for 8-byte elements, two banks each)."""
    most = target.warp_size // shared_wavefronts(target, tile.candidate.element_bytes)
    order = tile.in_shared_order(tile.candidate.dims)
    position = order.index(x_loop.index)
    delta = x_loop.step
    if position == len(order) - 1:
        factor = delta
    elif position == len(order) - 2:
        factor = delta * (tile.chunk if tile.aligned_rows else 1)
    else:
        factor = most
    return min(factor, most)


def point_reuse(access: GlobalAccess, mapping: KernelMapping) -> int:
    """How many of an interleaved thread's points share each read of ``access``."""
    loops = reuse_loops(access, mapping.kernel.indices)
    return math.prod(m.seq for m in mapping.loops if m.index in loops)


def resident_blocks(target: GpuTarget, threads_per_block: int, blocks: float) -> int:
    """The blocks one SM must hold at once for a launch of ``blocks`` blocks
    (``span_blocks``): as many as its thread and block slots allow, but no more than the
    grid gives each SM, since a launch of fewer blocks than that never has more resident."""
    by_slots = min(target.max_blocks_per_sm, target.max_threads_per_sm // threads_per_block)
    return max(1, min(by_slots, math.ceil(blocks / target.sm_count)))


def most_blocks(extents: tuple[int, ...], caps: tuple[int, ...]) -> dict[int, int]:
    """Per ``m``, the most blocks a launch of a band of ``extents`` has when a block spans
    ``2^m`` of its points: over every split of that span into a power of two per loop
    (``2^p_j``, ``p_j`` at most the loop's ``caps``), the grid ``prod ceil(N_j / 2^p_j)``,
    which rounds each loop's blocks up (a 33 x 12800 band in blocks of 32 x 32 points: 800
    blocks, where ``prod N / 2^m`` counts 412.5). A span no split fits is absent."""
    most: dict[int, int] = {}
    for logs in itertools.product(*(range(cap + 1) for cap in caps)):
        grid = math.prod(-(-n // 2**p) for n, p in zip(extents, logs))
        m = sum(logs)
        most[m] = max(most.get(m, 0), grid)
    return most


def span_blocks(most: dict[int, int], extents: tuple[int, ...], span_log: int) -> int:
    """The blocks counted for a block span of ``2^span_log``: ``most_blocks``' count, or,
    for a span no split fits, the band's points over it (at least one block)."""
    return most.get(span_log, -(-math.prod(extents) // 2**span_log))


def shared_capacity(target: GpuTarget, threads_per_block: int, blocks: float) -> int:
    """Shared memory a block may use without the opt-in, and without holding fewer blocks
    per SM than ``resident_blocks``: the SM's shared memory split among them, less the
    system's reserve of each, in whole allocation units. A launch whose blocks are too few to
    fill the SMs' thread slots (1024^3 GEMM blocks of 64 x 128 points: 128 blocks, one an SM)
    may give each block more than its thread count's share."""
    unit = target.shared_memory_allocation_unit
    share = target.shared_memory_per_sm // resident_blocks(target, threads_per_block, blocks)
    share = (share - target.shared_memory_reserved_per_block) // unit * unit
    return max(0, min(target.shared_memory_per_block, share))


def fill_fraction(
    target: GpuTarget,
    mapping: KernelMapping,
    extents: tuple[int, ...],
    busy_lanes: int | None = None,
    shared_bytes: int = 0,
) -> float:
    """The fraction of the GPU a launch keeps busy, in the model's form (``ScipModel._time``:
    prod N / prod S threads, or prod N independent points where they interleave, against the
    GPU's thread slots; prod N / prod T S blocks against its SMs; the thread slots that blocks
    of this size can hold), whatever the rounding up. ``busy_lanes``: of a point's lanes,
    those with work (``KernelProblem.busy_lanes``; all of them where None); ``shared_bytes``:
    a block's shared arrays, which may hold the SM to fewer blocks (``occupancy_penalty``)."""
    work = math.prod(extents)
    # with lanes a warp or a block per point: its busy lanes each
    lanes = mapping.lanes if busy_lanes is None else busy_lanes
    in_flight = (work if mapping.interleaved else work / mapping.points) * lanes
    span = math.prod(m.threads * m.seq for m in mapping.loops)
    return min(
        1.0,
        in_flight / (target.sm_count * target.max_threads_per_sm),
        work / span / target.sm_count,
        1 / occupancy_penalty(target, mapping.threads_per_block, shared_bytes),
    )


def latency_time(
    target: GpuTarget,
    work: int,
    points: int,
    reads_global: bool,
    threads_per_block: int | None = None,
    shared_bytes: int = 0,
) -> float:
    """The first-load roof in seconds: ``work / points`` threads, at most as many resident
    as the GPU's thread slots hold in blocks of ``threads_per_block`` (all of them where it is
    None; ``occupancy_penalty``, with ``shared_bytes`` a block), each waiting ``memory_latency_s`` for its first global
    load, so a launch takes at least that latency per wave of threads, and at least one
    (Little's law in the model's form: a thread with more points has more loads in flight,
    and fewer waves wait). Not divided by the fill: the waves already count the threads.
    Measured on an H100: a transpose with one point per thread ran at 55% of a copy's
    bandwidth, with four at 96%, at the same occupancy (docs/benchmarks/2026-11-24-h100.md).
    0 for a kernel that reads no global memory (stores do not wait)."""
    if not reads_global:
        return 0.0
    slots = target.sm_count * target.max_threads_per_sm
    if threads_per_block is not None:
        slots /= occupancy_penalty(target, threads_per_block, shared_bytes)
    return target.memory_latency_s * max(1.0, work / points / slots)


def tile_count(extent: int, tile: int) -> int:
    """The tiles of a tiled loop of ``extent`` iterations in tiles of ``tile``."""
    return -(-extent // tile)


def tile_latency(target: GpuTarget, tiles: int) -> float:
    """The tile-loads roof in seconds of a tiled staged kernel: each step of the tile loop
    waits for one tile's loads, ``memory_latency_s``, whether that copy was issued at the
    step's start (one slot per tile: the waits then add to the compute, ``KernelCost``) or
    one step ahead (double-buffered: they overlap it). A lower bound: one wave of blocks."""
    return target.memory_latency_s * tiles


def atomic_time(target: GpuTarget, updates: int) -> float:
    """The atomics roof: atomic updates of one element are applied one after another where
    the element lives (the L2 slice), at most one per clock: ``updates`` of the element
    most updated take ``updates / clock`` whatever the mapping (an assumption, not
    calibrated on a GPU; a scatter's elements are known only from the data and not counted)."""
    return updates / target.clock_hz


def occupancy_penalty(target: GpuTarget, threads_per_block: int, shared_bytes: int = 0) -> float:
    """1 / the fraction of an SM's thread slots that blocks of this size can occupy, each
    holding ``shared_bytes`` of shared memory that the model lets limit how many an SM holds
    (the arrays lanes share, ``shared_locals.py``; a staged tile is kept within the share of
    a full SM instead, ``shared_capacity``)."""
    resident = min(target.max_threads_per_sm, target.max_blocks_per_sm * threads_per_block)
    if shared_bytes:
        resident = min(resident, threads_per_block * blocks_by_shared_memory(target, shared_bytes))
    return target.max_threads_per_sm / max(1, resident)


def blocks_by_shared_memory(target: GpuTarget, shared_bytes: int) -> int:
    """The blocks of ``shared_bytes`` of shared memory each that an SM holds at once: its
    shared memory over each block's bytes with the system's reserve, in whole allocation
    units (at least one: a block within the per-block limit always runs)."""
    unit = target.shared_memory_allocation_unit
    per_block = -(-(shared_bytes + target.shared_memory_reserved_per_block) // unit) * unit
    return max(1, target.shared_memory_per_sm // per_block)


def sectors_per_request(stride: int, element_bytes: int, *, lanes: int, sector: int) -> int:
    """Sectors of ``sector`` bytes touched by one warp of ``lanes`` lanes ``stride`` elements apart."""
    span = (lanes - 1) * abs(stride) * element_bytes + element_bytes
    return min(lanes, max(1, -(-span // sector)))


def wrapped_sectors(
    stride: int, row_stride: int, element_bytes: int, *, lanes: int, warp: int, sector: int
) -> int:
    """Sectors touched by one warp that covers ``lanes`` lanes ``stride`` elements apart in
    each of ``warp / lanes`` rows ``row_stride`` elements apart: at most the sectors of its
    whole span, at most the rows times the sectors of one row, at most the lanes times the
    sectors of one column, at most one per lane."""
    count = warp // lanes
    row = (lanes - 1) * abs(stride) * element_bytes + element_bytes
    column = (count - 1) * abs(row_stride) * element_bytes + element_bytes
    span = row + column - element_bytes
    return max(1, min(warp, -(-span // sector), count * -(-row // sector), lanes * -(-column // sector)))


def lane_stride(access: GlobalAccess, spread: tuple[SpreadLoop, ...], warp: int) -> int | None:
    """With lanes (``lanes.py``): the elements between neighbouring lanes' addresses for an
    access of a spread loop (one step of the loop within a warp of ``warp`` lanes, exact by
    isl: iteration i runs on lane i mod lanes, a multiple of the warp), None for any other
    access (lane 0's alone). ``KernelProblem.lane_strides`` keeps them, one isl computation
    each."""
    loop = spread_loop_of(access, spread)
    if loop is None:
        return None
    return access.exact_stride({loop.index: 1}, within=(loop.index, warp))


def spread_loop_of(access: GlobalAccess, spread: tuple[SpreadLoop, ...]) -> SpreadLoop | None:
    """The spread loop whose statements make ``access`` (None: lane 0's own access)."""
    return next((sp for sp in spread if access.statement in sp.statements), None)


def lane_busy(access: GlobalAccess, spread: tuple[SpreadLoop, ...], extents: dict, warp: int) -> int:
    """With lanes: the lanes one warp request of ``access`` serves. A spread loop of ``n``
    iterations per band point (``extents``, by the loop's path, at the cost sizes) keeps
    ``min(n, warp)`` lanes of a warp busy; a loop as long as a warp, or an access of no
    spread loop (lane 0's, ``lane_sectors``), counts the whole warp."""
    loop = spread_loop_of(access, spread)
    if loop is None:
        return warp
    return max(1, min(warp, extents.get(loop.path, warp)))


def lane_sectors(target: GpuTarget, access: GlobalAccess, stride: int | None, busy: int | None = None) -> int:
    """The model's sectors per request of an access with lanes, ``stride`` its
    ``lane_stride``: a spread loop's access spans the warp along the loop; lane 0's own
    access is a request per instance, one sector, i.e. ``sector_bytes`` bytes per instance,
    which the model's ``instances * sigma`` bytes counts as ``sigma = sector_bytes`` (the
    model takes a request of a warp of lanes to move ``sector_bytes`` per sector, so a sector
    per lane is ``warp_size = sector_bytes``). A spread loop shorter than a warp (``busy``
    lanes, ``lane_busy``) makes a request per ``busy`` instances: its sectors count
    ``warp / busy`` times, as a warp's requests would."""
    if stride is None:
        return target.sector_bytes
    busy = target.warp_size if busy is None else busy
    sectors = sectors_per_request(stride, access.element_bytes, lanes=busy, sector=target.sector_bytes)
    return -(-sectors * target.warp_size // busy)


def lane_instructions(
    target: GpuTarget,
    accesses: tuple[GlobalAccess, ...],
    strides: tuple[int | None, ...],
    spread: tuple[SpreadLoop, ...],
    points: int,
    lanes: int | None = None,
    runs: dict[tuple[int, ...], int] | None = None,
    busy: tuple[int, ...] | None = None,
) -> float:
    """Warp instructions lanes add to a kernel: lane 0's global accesses (``strides`` None)
    become a request per instance (a warp per band point), and per band point (``points``),
    spread loop and run of it (``runs``, by the loop's path: the iterations of the loops
    around it, 1 where absent), the fork (a select of the identity, a shuffle per broadcast local, a
    ``__syncwarp``) and the join (a ``__syncwarp``, then per accumulator a shuffle and an
    operation per step of the butterfly, log2(warp) steps); a spread loop's access whose
    ``busy`` lanes are fewer than a warp's a request per ``busy`` instances. With ``lanes`` of several warps
    (a block per point, ``codegen/lanes_c.py``) every warp runs the fork and the join: the
    fork a barrier and a select per accumulator that starts at the identity, and where lane 0
    shares values (broadcasts, the start of a ``max=``/``min=``) a branch, its stores, a
    second barrier and a load of each; the join each warp's butterfly, then a branch, a store
    per accumulator, a barrier, and per accumulator a load and an operation per warp (every
    lane combines the warps' partials in one order), or a barrier alone with no accumulator."""
    warp = target.warp_size
    warps = max(1, (lanes or warp) // warp)
    extra = 0.0
    for k, (a, stride) in enumerate(zip(accesses, strides)):
        if stride is None:
            extra += a.instances - -(-a.instances // warp)
        elif busy is not None and busy[k] < warp:  # a request per busy lanes' instances
            extra += -(-a.instances // busy[k]) - -(-a.instances // warp)
    steps = log2_floor(warp)
    for sp in spread:
        accumulators = len(sp.accumulators)
        times = points * (runs or {}).get(sp.path, 1)
        if warps == 1:
            extra += times * (3 + len(sp.broadcasts) + 2 * steps * accumulators)
            continue
        shared = len(sp.from_lane0)  # values lane 0 shares through shared memory
        starts = shared - len(sp.broadcasts)  # accumulators that start from lane 0's value
        fork = 1 + (accumulators - starts) + (2 + 2 * shared if shared else 0)
        join = 2 * steps * accumulators + (2 + accumulators + 2 * warps * accumulators if accumulators else 1)
        extra += times * warps * (fork + join)
    return extra


def grid_need(extent: int, most_blocks: int) -> int:
    """log2 of the points per block (T S) a loop of ``extent`` iterations needs so that its
    blocks fit a grid axis of at most ``most_blocks``: ceil(N / (T S)) <= most."""
    return max(0, math.ceil(math.log2(extent / most_blocks))) if extent > most_blocks else 0


def log2_floor(value: int) -> int:
    """The largest k with 2^k <= value (exact for powers of two; a limit that is not one,
    e.g. 768 threads per block, allows the powers of two below it)."""
    return value.bit_length() - 1
