"""The SCIP model of one kernel's mapping (``ScipModel``); ``solve.py`` builds the problem
and solves it, ``cost_model.py`` holds the formulas both sides share. Two parts of the
model live in modules of their own, as mixins of ``ScipModel``: the shared-memory staging
constraints (``scip_staging.py``) and the start hints (``scip_hints.py``).

Per kernel, with band loops ``j`` of largest extent ``N_j`` at the cost sizes, the model
has (binary unless said otherwise):

* ``ax[j,a]``, ``bx[j,a]``: loop j's thread part / block part is on axis a in {x, y, z};
  every loop has one of each, an axis holds at most one loop, and x holds one;
* ``ut[j,k]``: T_j = 2^k (k <= 10); ``us[j,m]``: S_j = 2^m (m <= 4); the distribution
  (``space.py``), one of ``cyc[j]`` (cyclic), ``blk[j]`` (blocked) and ``ug[j,m]`` (grouped
  by V_j = 2^m, 0 < m < log2 S_j);
* ``step_j = cyc_j + blk_j S_j + sum 2^m ug[j,m]`` (1, S_j or the group) and the lane step
  ``delta_j = ax[j,x] * step_j`` (integers, quadratic equalities): moving from lane tid to
  tid + 1 moves loop j by delta_j (the loop on x has at least 32 threads, so a warp lies
  along x);
* per global access r: ``D_r >= |addr_r(x + delta) - addr_r(x)|`` for every point x of the
  domain, linearized by Farkas (``accesses.py``), and the sectors one warp request touches
  ``sigma_r in [1, 32]``: ``32 sigma_r >= 31 e D_r + e`` (the span of 32 lanes at stride
  D_r elements of e bytes) unless ``z_r`` (then ``sigma_r = 32``, one sector per lane);
* ``interleaved``: the thread's points run inside every step of the body (outer-product
  order, ``space.py``); 0 where the body has no loop (``cost_model.interleavable``);
* ``lanes`` (w), only for a kernel whose body has a loop to spread (``lanes.py``): a warp
  per band point, or 2^m warps (``lane_warps_log2=m``, one set where w is; m > 0 only where
  the spread loops' iterations reach that many warps and a warp per point leaves thread
  slots empty: a block per point, no band loop with threads). threadIdx.x then holds the
  lanes (no band loop on x, warp 2^m times the threads in the block, and the busy ones
  among them in the fill and the first-load roof), a spread loop's access spans the warp
  along the loop and lane 0's is a request of one sector per instance (``lane_sectors``),
  the forks and joins count in the issue time (``lane_instructions``), and nothing is
  staged or interleaved;
* the fraction of the GPU the launch fills, 1/u: ``u >= 1``,
  ``u >= (SMs * threads per SM) * prod_j S_j / prod_j N_j`` (fewer threads than the GPU
  holds) unless interleaved (then each point is independent work in flight, and the bound
  is ``(SMs * threads per SM) / prod_j N_j``), ``u >= SMs * prod_j T_j S_j / prod_j N_j``
  (fewer blocks than SMs) and ``u >= threads per SM / (blocks per SM * threads per block)``
  (blocks too small to fill an SM's thread slots).

Shared-memory staging (``staging.py`` says what can be staged and how it runs): a binary
``scope`` per tileable seq loop of the body (or the whole body), at most one; the tile
``K = 2^kappa`` (kappa <= 6 and K not beyond the loop's extent; 1 for the whole body); and a
binary ``st`` per candidate buffer of the chosen scope. A staged buffer's reads in the scope
leave global memory (their sectors drop to 0; each read takes shared-memory wavefronts,
divided by the points that share it where they interleave) and its copies move
``e * prod_j N_j * N_L / prod_{j not in its tile} T_j S_j`` bytes, its tile takes
``e * prod widths`` bytes of shared memory (with an allowance of 1/8 for padding, ``PADDING``), the tiles
together at most ``shared_capacity`` (48 KB, and no more than the SM's shared memory split
among the blocks it must hold: its thread and block slots' worth, or fewer where the grid
gives each SM fewer), and a tile's rows are at least a 32-byte sector wide. The powers of
two are indicator binaries over the sums of the log2 decisions, so all of it is linear.

Objective (microseconds): a roofline of four roofs, each times u: ``bytes / bandwidth``
with ``bytes = sum_r instances_r * sigma_r`` (a warp request of sigma sectors moves
32 sigma bytes for 32 instances) plus the copies, less what the caches serve and plus the
footprints of the buffers that stay in L2 (``caching.py``; where there are any, the higher
of that and every byte at the caches' bandwidth); ``flops / peak``; shared-memory
wavefronts (staged reads, tile stores) at the SMs' rate; and warp instructions at the issue
rate (``cost_model.issue_rate``) — so the objective value is the predicted kernel time,
plus 1% of the memory and shared-memory times (``RANKING_WEIGHT``), which ranks mappings under
the same roof. A tiny tie-break prefers block axes equal to thread axes, fewer per-thread
points, larger tiles (fewer barriers) and points one after another. Limits, all read from the
``GpuTarget`` (the numbers are H100's): a warp (32) <= threads per block <= 1024 (the power
of two at or below ``max_threads_per_block``), blockDim and gridDim within the target's
per-axis limits, registers within its per-thread and per-block limits; and polymap's own:
T_j S_j not beyond the next power of two of N_j, at most 64 points per thread.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from pyscipopt import Model, quicksum

from polymap.errors import InternalError
from polymap.mapping.accesses import GlobalAccess, delta_symbol
from polymap.mapping.caching import ADJACENT, AGAIN, FIRST
from polymap.mapping.cost_model import (
    LOOP_UNROLL_POINTS,
    MAX_LOG_SEQ,
    MAX_LOG_SEQ_TOTAL,
    MAX_LOG_TILE,
    REGISTERS_LANES,
    REGISTERS_PER_STAGED,
    TIE_BREAK,
    arithmetic_instructions,
    grid_need,
    interleavable,
    issue_rate,
    lane_instructions,
    lane_sectors,
    log2_floor,
    loop_step_instructions,
    occupancy_penalty,
    shared_wavefront_rate,
)
from polymap.mapping.farkas import add_to_scip, exact_certificate
from polymap.mapping.result import RANKING_WEIGHT
from polymap.mapping.scip_hints import StartHints
from polymap.mapping.scip_staging import StagingConstraints
from polymap.mapping.space import (
    Axis,
    Distribution,
    KernelMapping,
    LoopMapping,
    LoopPin,
    Pins,
    Staging,
    merge_pins,
)
from polymap.mapping.staging import (
    copy_vectors,
)

if TYPE_CHECKING:
    from polymap.mapping.solve import KernelProblem


class CertificateError(InternalError):
    """SCIP's solution holds its Farkas equations only within its feasibility tolerance:
    ``KernelProblem.solve`` solves again with a tighter one; a second failure is a bug."""


class ScipModel(StagingConstraints, StartHints):
    """Adds the decision variables and constraints of one kernel to a SCIP model, one method
    per constraint group; every hardware limit is read from the kernel's ``GpuTarget``."""

    def __init__(self, problem: KernelProblem, scip: Model, pins: Pins) -> None:
        self.p = problem
        self.scip = scip
        t = problem.target
        band = problem.kernel.band
        self.n = len(band)
        self.log_warp = log2_floor(t.warp_size)  # a power of two (GpuTarget.check)
        self.log_block = log2_floor(t.max_threads_per_block)  # block sizes are powers of two
        self.certificates: list = []  # (access, Farkas system, its SCIP variables)
        pinned = {loop.index: merge_pins(pins.for_loop(problem.kernel.name, loop.index)) for loop in band}
        self.pinned = any(pins.for_loop(problem.kernel.name, loop.index) for loop in band)
        self.loop_pins = pinned
        caps = [max(0, math.ceil(math.log2(n))) if n > 1 else 0 for n in problem.extents]
        for j, loop in enumerate(band):
            pin = pinned[loop.index]
            if pin.threads or pin.seq:  # a pinned size may overshoot: the guard handles it
                caps[j] = max(caps[j], log2_floor(pin.threads or 1) + log2_floor(pin.seq or 1))
        # fewer iterations than a warp: the block is exactly one warp, guarded
        self.tiny = sum(caps) < self.log_warp
        self.caps = tuple(caps)
        self._decisions()
        self._loop_limits(caps, pinned)
        self._block_limits()
        deltas = self._lane_steps()
        rows = self._warp_rows(caps)
        traffic = self._coalescing(deltas, rows)
        p_log = {loop.index: self.lt[j] + self.ls[j] for j, loop in enumerate(band)}
        block = self._block_size()
        traffic = self._staging(scip, pins, traffic, p_log, block)
        self._lanes(block)
        self._registers(scip, quicksum(self.ls[j] for j in range(self.n)), block)
        # whose bytes each traffic term moves: an access's, then each candidate's copies
        owners = [a.buffer for a in problem.accesses] + [c.buffer for c in problem.candidates]
        time, traffic_time = self._time(traffic, owners[: len(traffic)], block)
        if self.shared_used is not None:
            self._shared_capacity(scip, self.shared_used, block)
        self._tile_loads(time)
        self._objective(time, traffic_time)
        # the fill's products with the traffic relax weakly until the points per thread and
        # their order are fixed: SCIP branches on those first (the four-deep band of
        # tests/test_fold.py: proved optimal in 2 s, a 1700% gap at 30 s without; with the
        # threads and block sizes too, it was back at 30 s: measured, not derived)
        # The layouts and distributions decide which loads are vectors and which lanes meet
        # in the banks: branching on them early too took fc_bias_relu from 11.7 s to 2.6 s
        # and orojenesis_ffn's first kernel from its 30 s limit to 0.8 s (measured)
        # (the groups' binaries are left to SCIP's order: with them first as well,
        # matmul_1024's SCIP time doubled, and without the distribution's binaries first
        # orojenesis_ffn's went from 2.5 s to 30 s; measured)
        for var in [
            *self.us.values(),
            self.inter,
            *self.cyc.values(),
            *self.blk.values(),
            *self.transposed.values(),
        ]:
            scip.chgVarBranchPriority(var, 10)
        for var in self.ug.values():
            scip.chgVarBranchPriority(var, 5)

    def _one_of(self, name: str, values, total=1):
        """Indicator binaries ``name=m``, one per value ``m`` of an exponent, of which
        ``total`` are set (1, or a binary that switches the exponent on): the binaries and the
        exponent ``sum m b_m``, for a power ``sum 2^m b_m`` that stays linear in binaries."""
        b = {m: self.scip.addVar(f"{name}={m}", vtype="B") for m in values}
        self.scip.addCons(quicksum(b.values()) == total)
        return b, quicksum(m * var for m, var in b.items())

    def _decisions(self) -> None:
        """The binaries of every band loop: thread axis, block axis, log2 T, log2 S, cyclic."""
        scip, band = self.scip, self.p.kernel.band
        self.ax = {
            (j, a): scip.addVar(f"ax[{loop.index},{a.value}]", vtype="B")
            for j, loop in enumerate(band)
            for a in Axis
        }
        self.bx = {
            (j, a): scip.addVar(f"bx[{loop.index},{a.value}]", vtype="B")
            for j, loop in enumerate(band)
            for a in Axis
        }
        self.ut = {
            (j, k): scip.addVar(f"ut[{loop.index},{k}]", vtype="B")
            for j, loop in enumerate(band)
            for k in range(self.log_block + 1)
        }
        self.us = {
            (j, m): scip.addVar(f"us[{loop.index},{m}]", vtype="B")
            for j, loop in enumerate(band)
            for m in range(MAX_LOG_SEQ + 1)
        }
        self.cyc = {j: scip.addVar(f"cyclic[{loop.index}]", vtype="B") for j, loop in enumerate(band)}
        self.blk = {j: scip.addVar(f"blocked[{loop.index}]", vtype="B") for j, loop in enumerate(band)}
        self.ug = {
            (j, m): scip.addVar(f"grouped[{loop.index}]={m}", vtype="B")
            for j, loop in enumerate(band)
            for m in range(1, MAX_LOG_SEQ)
        }
        # the thread's points interleave: every step of the body runs all of them
        self.inter = scip.addVar("interleaved", vtype="B", ub=1 if interleavable(self.p.kernel) else 0)
        self.lt = {j: quicksum(k * self.ut[j, k] for k in range(self.log_block + 1)) for j in range(self.n)}
        self.ls = {j: quicksum(m * self.us[j, m] for m in range(MAX_LOG_SEQ + 1)) for j in range(self.n)}
        # log2 of a grouped loop's group (0 unless grouped)
        self.lg = {j: quicksum(m * self.ug[j, m] for m in range(1, MAX_LOG_SEQ)) for j in range(self.n)}
        self.grouped = {j: quicksum(self.ug[j, m] for m in range(1, MAX_LOG_SEQ)) for j in range(self.n)}
        self.seq = {
            j: scip.addVar(f"S[{band[j].index}]", vtype="I", lb=1, ub=2**MAX_LOG_SEQ) for j in range(self.n)
        }
        for j in range(self.n):
            scip.addCons(quicksum(self.ax[j, a] for a in Axis) == 1)
            scip.addCons(quicksum(self.bx[j, a] for a in Axis) == 1)
            scip.addCons(quicksum(self.ut[j, k] for k in range(self.log_block + 1)) == 1)
            scip.addCons(quicksum(self.us[j, m] for m in range(MAX_LOG_SEQ + 1)) == 1)
            scip.addCons(self.cyc[j] + self.blk[j] + self.grouped[j] == 1)
            for m in range(1, MAX_LOG_SEQ):  # a group strictly between 1 and S
                scip.addCons((m + 1) * self.ug[j, m] <= self.ls[j])
            scip.addCons(self.seq[j] == quicksum(2**m * self.us[j, m] for m in range(MAX_LOG_SEQ + 1)))
        # a warp per band point (``lanes.py``): threadIdx.x holds the lanes, the band y and z
        # (the constant 0 where the body has no loop to spread: the model is then as before)
        self.w = scip.addVar("lanes", vtype="B") if self.p.spread else 0
        # with lanes, 2^m warps per band point (``lane_warps_log2=m``, one set where w is):
        # m > 0 is a block per band point whose warps combine through shared memory
        self.uw, self.lw, self.tree = {}, 0, 0
        self.shared_occupancy = []  # (occupancy penalty, binary of a lanes' block shape)
        if self.p.spread:
            self.uw, self.lw = self._one_of(
                "lane_warps_log2", range(self._most_lane_warps() + 1), total=self.w
            )
            self.tree = quicksum(var for m, var in self.uw.items() if m > 0)
        # threadIdx.x always holds a loop or the lanes: it decides which iterations are
        # neighbours in a warp
        scip.addCons(quicksum(self.ax[j, Axis.X] for j in range(self.n)) + self.w == 1)
        for a in Axis:
            scip.addCons(quicksum(self.ax[j, a] for j in range(self.n)) <= 1)
            scip.addCons(quicksum(self.bx[j, a] for j in range(self.n)) <= 1)

    def _most_lane_warps(self) -> int:
        """log2 of the most warps a point's lanes may have: as many as the block allows, but
        none that the spread loops' iterations leave without work (they would only add
        barriers), and no more than fill the GPU's thread slots with a thread's point each
        (beyond, more warps per point add waves of threads and barriers but no work in
        flight, and tie with the fewest under a roof, where SCIP's tolerance picked any:
        gemv took 32 warps as readily as 2; left out of the search, which they also slowed,
        as a grouped loop off x is), unless a pin asks for them, or fewer band points in
        flight let a band point's re-reads hit in L2 (``KernelProblem.reuse_fits``: the
        fewest warps that do), or the lanes' shared arrays hold an SM to fewer blocks than
        its thread slots allow (``KernelProblem.shared_fit_warps_log2``: up to the fewest
        warps that they do not)."""
        t, p = self.p.target, self.p
        useful = max(1, -(-p.spread_iterations // t.warp_size))  # an empty loop: one warp
        busy = max(0, (useful - 1).bit_length())  # the power of two at or above the busy warps
        slots = t.sm_count * t.max_threads_per_sm
        most = min(busy, max(0, math.ceil(math.log2(slots / (math.prod(p.extents) * t.warp_size)))))
        if AGAIN in p.reuse:
            most = next((m for m in range(most, busy + 1) if p.reuse_fits(t.warp_size * 2**m)), most)
        # or fewer blocks of more warps hold more threads where the shared arrays limit them
        most = max(most, min(busy, p.shared_fit_warps_log2()))
        for lanes in (pin.lanes for pin in self.loop_pins.values() if pin.lanes):
            most = max(most, log2_floor(max(lanes, t.warp_size)) - self.log_warp)
        return min(most, self.log_block - self.log_warp)

    def _loop_limits(self, caps: list[int], pinned: dict[str, LoopPin]) -> None:
        """Per loop: blockDim and gridDim of its axes within the target's limits, T_j S_j not
        beyond the next power of two of N_j, the x loop at least a warp wide (or its whole
        extent), and the pins."""
        scip, p, t = self.scip, self.p, self.p.target
        for j, loop in enumerate(p.kernel.band):
            lt, ls = self.lt[j], self.ls[j]
            for a, most in zip(Axis, t.block_dim_limits):
                scip.addCons(lt <= log2_floor(most) + self.log_block * (1 - self.ax[j, a]))
            if self.tiny:
                scip.addCons(ls == 0)
            else:
                scip.addCons(lt + ls <= caps[j])
                scip.addCons(lt >= min(self.log_warp, caps[j]) * self.ax[j, Axis.X])
            for a, most in zip(Axis, t.grid_dim_limits):
                # ceil(N_j / (T_j S_j)) blocks on axis a: T_j S_j >= N_j / most
                need = grid_need(p.extents[j], most)
                if need:
                    scip.addCons(lt + ls >= need * self.bx[j, a])
            pin = pinned[loop.index]
            if pin.distribution is not Distribution.GROUPED and pin.group in (None, 1):
                # a group changes the cost only where the lanes step along the loop: on x
                # (elsewhere it ties with blocked, and the ties are left out of the search)
                scip.addCons(self.grouped[j] <= self.ax[j, Axis.X])
            self._pin(scip, j, pin, lt, ls)

    def _block_limits(self) -> None:
        """A block of at least a warp (exactly one for a tiny kernel) and at most
        ``max_threads_per_block`` threads; at most ``2^MAX_LOG_SEQ_TOTAL`` points per thread."""
        scip = self.scip
        self.total_lt = quicksum(self.lt[j] for j in range(self.n))
        # log2 of the block's threads: the band's, times the lanes (2^(log_warp + lw) or 1)
        self.threads_log = threads_log = self.total_lt + self.log_warp * self.w + self.lw
        for j in range(self.n):  # several warps per point: a block per point (no band threads)
            scip.addCons(self.lt[j] <= self.log_block * (1 - self.tree))
        if self.tiny:  # a warp, or with lanes the point's warps (a block per point)
            scip.addCons(threads_log - self.lw == self.log_warp)
        else:
            scip.addCons(threads_log >= self.log_warp)
            scip.addCons(threads_log <= self.log_block)
        scip.addCons(quicksum(self.ls[j] for j in range(self.n)) <= MAX_LOG_SEQ_TOTAL)

    def _lane_steps(self) -> dict[str, object]:
        """step_j = 1 (cyclic), the group (grouped) or S_j (blocked); delta_j = step_j on the
        x loop, else 0."""
        scip = self.scip
        deltas = {}
        self.steps = {}
        for j, loop in enumerate(self.p.kernel.band):
            step = scip.addVar(f"step[{loop.index}]", vtype="I", lb=1, ub=2**MAX_LOG_SEQ)
            groups = quicksum(2**m * self.ug[j, m] for m in range(1, MAX_LOG_SEQ))
            scip.addCons(step == self.cyc[j] + self.blk[j] * self.seq[j] + groups)
            delta = scip.addVar(f"delta[{loop.index}]", vtype="I", lb=0, ub=2**MAX_LOG_SEQ)
            scip.addCons(delta == self.ax[j, Axis.X] * step)
            deltas[loop.index] = delta
            self.steps[j] = step
        return deltas

    def _warp_rows(self, caps: list[int]) -> dict[int, object]:
        """A warp is the first ``warp_size`` linear thread ids: along x while the x loop has a
        warp of threads or more; when it has ``T_x = 2^k`` fewer, the warp wraps into
        ``warp / T_x`` rows along the y loop, or further into z when y has fewer. Returns
        ``{k: (W_k, H_k)}``, ``W_k = 1`` when the x loop has ``2^k < warp`` threads, ``H_k = 1``
        when the y loop holds the rows, for the k the limits allow (none when every loop that
        may be on x has a warp of iterations); and
        sets ``self.y_deltas``, the steps between rows (``delta_j = step_j`` on the y loop)."""
        scip, band = self.scip, self.p.kernel.band
        self.y_deltas = {}
        self.wrapped = 0
        rows = {}
        for k in range(self.log_warp):
            # off the tiny case the x loop runs min(warp, its whole extent) threads: k = caps[j]
            loops = [j for j in range(self.n) if self.tiny or caps[j] == k]
            if not loops:
                continue
            w = []
            for j in loops:
                var = scip.addVar(f"wrap[{band[j].index},{k}]", vtype="B")  # x loop j with 2^k threads
                scip.addCons(var <= self.ax[j, Axis.X])
                scip.addCons(var <= self.ut[j, k])
                scip.addCons(var >= self.ax[j, Axis.X] + self.ut[j, k] - 1)
                w.append(var)
            on = quicksum(w)
            # H_k = 1: the y loop holds the warp's rows, T_y >= warp / 2^k. Without it (a small
            # 3-D band: 4 x 4 x 4 threads) the warp spans z too and is charged a sector per lane
            held = scip.addVar(f"rows_in_y[{k}]", vtype="B")
            scip.addCons(held <= on)
            scip.addCons(quicksum(self.ax[j, Axis.Y] for j in range(self.n)) >= held)
            for j in range(self.n):
                scip.addCons(self.lt[j] >= (self.log_warp - k) * (held + self.ax[j, Axis.Y] - 1))
            rows[k] = (on, held)
        self.wrapped = quicksum(on for on, _ in rows.values())  # 1 where the warp wraps into y
        if rows:
            for j, loop in enumerate(band):
                delta = scip.addVar(f"delta_y[{loop.index}]", vtype="I", lb=0, ub=2**MAX_LOG_SEQ)
                scip.addCons(delta == self.ax[j, Axis.Y] * self.steps[j])
                self.y_deltas[loop.index] = delta
        return rows

    def _coalescing(self, deltas: dict, rows: dict[int, object]) -> list:
        """Per global access: the lane stride D bounded by Farkas over the domain, and the
        sectors one warp request touches, ``sector * sigma >= (warp - 1) e D + e`` unless
        ``z`` (then ``sigma = warp``, one sector per lane). A warp that wraps into rows
        (``_warp_rows``) touches at most the sectors of its whole span, and at most its rows
        times the sectors of one row: the smaller bound holds (``_wrapped_sectors``).
        Returns the traffic terms."""
        scip, p, t = self.scip, self.p, self.p.target
        traffic = []
        self.sectors = []
        wrapped = quicksum(on for on, _ in rows.values()) if rows else 0
        strides, busy = p.lane_strides(p.spread), p.lane_busy(p.spread)
        for k, access in enumerate(p.accesses):
            bound = self._stride_bound(k, access, deltas, "D")
            sectors = scip.addVar(f"sigma[{access.statement}:{access.text}]", vtype="I", lb=1, ub=t.warp_size)
            wide = scip.addVar(f"z[{access.statement}:{access.text}]", vtype="B")
            e = access.element_bytes
            scip.addCons(sectors >= t.warp_size * wide)
            # the span bound holds unless z or a wrapped warp: an indicator, because a big-M
            # of the size of a row stride times SCIP's integrality tolerance (1e-7 on z) would
            # cancel the bound (seen: 2 sectors charged for 4)
            plain = scip.addVar(f"plain[{access.statement}:{access.text}]", vtype="B")
            scip.addCons(plain >= 1 - wide - wrapped - self.w)
            if self.p.spread:
                # with lanes: a spread loop's access spans the warp along the loop, any other
                # is lane 0's alone, a request of one sector per instance (``lane_sectors``)
                scip.addCons(sectors >= lane_sectors(t, access, strides[k], busy[k]) * self.w)
            scip.addConsIndicator(t.sector_bytes * sectors - (t.warp_size - 1) * e * bound >= e, plain)
            for on, held in rows.values():  # a warp over x, y and z: a sector per lane
                scip.addCons(wide >= on - held)
            if rows:
                row_bound = self._stride_bound(k, access, self.y_deltas, "Dy", Axis.Y)
                self._wrapped_sectors(access, rows, sectors, wide, bound, row_bound)
            traffic.append(access.instances * sectors)
            self.sectors.append(sectors)
        return traffic

    def _stride_bound(self, k: int, access: GlobalAccess, deltas: dict, label: str, axis: Axis = Axis.X):
        """An integer ``>= |addr(x + delta) - addr(x)|`` over the domain, by Farkas, with
        ``delta`` the steps of the loop on ``axis``: a bound ``D_j`` per band loop
        (``accesses.py``), of which the bound takes the one of the loop on ``axis``, through
        an indicator: a big-M of the size of the address span times SCIP's integrality
        tolerance (ax = 1 - 1e-7) would swallow the stride."""
        scip = self.scip
        bound = scip.addVar(f"{label}[{access.statement}:{access.text}]", vtype="I", lb=0)
        position = {loop.index: j for j, loop in enumerate(self.p.kernel.band)}
        for index, symbol, systems in access.per_loop:
            own = scip.addVar(f"{label}[{access.statement}:{access.text}:{index}]", vtype="I", lb=0)
            self._add_systems(
                k, access, systems, {symbol: own, delta_symbol(index): deltas[index]}, f"{label}.{index}"
            )
            scip.addConsIndicator(own - bound <= 0, self.ax[position[index], axis])
        return bound

    def _add_systems(self, k: int, access: GlobalAccess, systems, theta: dict, label: str) -> None:
        for system in systems:
            lams = add_to_scip(
                system, self.scip, theta, name=f"{access.statement}.{k}.{label}.{system.prefix}"
            )
            self.certificates.append((access, system, {**theta, **lams}))

    def _wrapped_sectors(self, access: GlobalAccess, rows: dict, sectors, wide, bound, row_bound) -> None:
        """For each wrap of ``L = 2^k`` lanes x ``R = warp / 2^k`` rows, one of three bounds
        holds (or ``z``, one sector per lane), and minimizing takes the smallest:

        * the whole span: ``sector * sigma >= (L - 1) e D + (R - 1) e D_y + e``;
        * by rows: ``sigma >= R * rowsec``, ``sector * rowsec >= (L - 1) e D + e``;
        * by columns: ``sigma >= L * colsec``, ``sector * colsec >= (R - 1) e D_y + e``
          (lanes far apart, rows adjacent: a transpose's write).

        Every switch is an indicator: a row of a large stride spans more sectors than any
        constant big-M of a warp's sectors would allow, and big-Ms of a stride's size do not
        survive SCIP's integrality tolerance (see ``_coalescing``)."""
        scip, t = self.scip, self.p.target
        e = access.element_bytes
        tag = f"{access.statement}:{access.text}"
        for k, (_, held) in rows.items():
            lanes, count = 2**k, t.warp_size // 2**k
            wraps = scip.addVar(f"wraps[{tag},{k}]", vtype="B")
            scip.addCons(wraps == held)
            # a row or a column may span more than a warp of sectors: no upper bound
            rowsec = scip.addVar(f"rowsec[{tag},{k}]", vtype="I", lb=1, ub=None)
            colsec = scip.addVar(f"colsec[{tag},{k}]", vtype="I", lb=1, ub=None)
            scip.addConsIndicator(t.sector_bytes * rowsec - (lanes - 1) * e * bound >= e, wraps)
            scip.addConsIndicator(t.sector_bytes * colsec - (count - 1) * e * row_bound >= e, wraps)
            by = {
                name: scip.addVar(f"{name}bound[{tag},{k}]", vtype="B") for name in ("span", "row", "column")
            }
            scip.addCons(quicksum(by.values()) + wide >= wraps)
            scip.addConsIndicator(
                t.sector_bytes * sectors - (lanes - 1) * e * bound - (count - 1) * e * row_bound >= e,
                by["span"],
            )
            scip.addConsIndicator(sectors - count * rowsec >= 0, by["row"])
            scip.addConsIndicator(sectors - lanes * colsec >= 0, by["column"])

    def _block_size(self) -> dict[int, object]:
        """One binary per log2 of the block's thread count."""
        scip = self.scip
        block = {v: scip.addVar(f"block_log2={v}", vtype="B") for v in range(self.log_block + 1)}
        scip.addCons(quicksum(block.values()) == 1)
        scip.addCons(quicksum(v * block[v] for v in block) == self.threads_log)
        return block

    def _block_span(self) -> dict[int, object]:
        """One binary per log2 of the band points a block spans (``prod T_j S_j``): the
        launch has ``prod N / 2^m`` blocks, which the fill and the shared-memory capacity read."""
        logs = quicksum(self.lt[j] + self.ls[j] for j in range(self.n))
        top = self.log_block + MAX_LOG_SEQ_TOTAL
        span, span_log = self._one_of("block_span_log2", range(top + 1))
        self.scip.addCons(span_log == logs)
        return span

    def _time(self, traffic: list, owners: list[str], block: dict):
        """The roofline time in microseconds (DRAM, FP32 and shared-memory roofs), divided by
        the fraction of the GPU filled, and the sum of the memory and shared-memory times (each
        divided by the fill), which the objective ranks ties by (``fill_fraction``):
        ``u >= 1``; ``u >= SMs * threads per SM * prod S_j / prod N_j`` unless the points
        interleave (then ``u >= SMs * threads per SM / prod N_j``: each point is independent
        work in flight, as a thread is); ``u >= SMs * prod T_j S_j / prod N_j`` (fewer blocks
        than SMs) and ``u >= threads per SM / (blocks per SM * threads per block)``."""
        scip, p, t = self.scip, self.p, self.p.target
        capacity = t.sm_count * t.max_threads_per_sm
        prod_s = self.seq[0]
        for j in range(1, self.n):
            nxt = scip.addVar(f"prodS[{j}]", vtype="I", lb=1, ub=2**MAX_LOG_SEQ_TOTAL)
            scip.addCons(nxt == prod_s * self.seq[j])
            prod_s = nxt
        u = scip.addVar("underfill", vtype="C", lb=1.0)
        extents = math.prod(p.extents)
        warp = t.warp_size
        # with lanes, 2^m warps per band point: warp 2^m times the threads
        scip.addCons(
            u
            >= capacity / extents * (1 - self.w)
            + quicksum(
                capacity / (self.p.busy_lanes(warp * 2**m) * extents) * var for m, var in self.uw.items()
            )
        )
        # prod S threads fewer unless interleaved (a big-M of 64 points: prod S <= 64)
        # (lanes and interleaving exclude each other: one big-M serves both)
        scip.addCons(extents * u >= capacity * (prod_s - 2**MAX_LOG_SEQ_TOTAL * (self.inter + self.w)))
        for m, var in self.uw.items():
            busy = self.p.busy_lanes(warp * 2**m)
            scip.addCons(busy * extents * u >= capacity * (prod_s - 2**MAX_LOG_SEQ_TOTAL * (1 - var)))
        # a block runs on one SM: fewer blocks than SMs leave SMs idle
        self.span = self._block_span()
        scip.addCons(u >= quicksum(t.sm_count * 2.0**m / extents * var for m, var in self.span.items()))
        # occupancy: an SM holds at most max_blocks_per_sm blocks, so small blocks leave
        # thread slots empty
        scip.addCons(u >= quicksum(occupancy_penalty(t, 2**v) * block[v] for v in block))
        for penalty, shape in self.shared_occupancy:  # and the lanes' shared arrays (``_lanes``)
            scip.addCons(u >= penalty * shape)
        # the atomics roof: a constant of the kernel, whatever the mapping (``atomic_time``)
        time = scip.addVar("time_us", vtype="C", lb=p.atomic_s * 1e6)
        memory = scip.addVar("memory_us", vtype="C", lb=0.0)
        # a buffer that stays in L2 (``caching``): DRAM moves its footprint once, and every
        # byte goes through the caches, at their own roof; so do the accesses of what a band
        # point touched before (``_dram_terms``)
        cached = p.cached_buffers
        dram = quicksum(self._dram_terms(traffic, owners)) + p.cached_bytes
        if cached or any(kind != FIRST for kind in p.reuse):
            # the higher of the DRAM and the caches' times, in one variable, times the fill:
            # one product (a second product of the fill with every traffic term, for the
            # caches' roof alone, took SCIP from 2.7 s to 29 s on a 256^3 GEMM; 8.9 s so).
            # ``memory`` is then that higher time: the ranking takes it (``KernelCost.ranking_s``)
            either = scip.addVar("memory_or_caches_us", vtype="C", lb=0.0)
            scip.addCons(either >= dram * (1e6 / t.dram_bandwidth))
            scip.addCons(either >= quicksum(traffic) * (1e6 / t.cache_bandwidth))
            scip.addCons(memory >= u * either)
        else:
            scip.addCons(memory >= u * dram * (1e6 / t.dram_bandwidth))
        scip.addCons(time >= memory)
        compute = u * (p.flops * 1e6 / t.peak_fp32_flops)
        scip.addCons(time >= compute)
        self.roofs = [memory, compute]  # each divided by the fill (``_tile_loads`` adds to them)
        traffic_time = memory
        issue = scip.addVar("issue_us", vtype="C", lb=0.0)
        # the statements' arithmetic (an FMA where a product feeds a sum), a load or store per
        # warp request, and a conversion per request of a 16-bit float (where staged, the
        # reads replace the requests: ``_staging``)
        base = arithmetic_instructions(t, p.arithmetic) + sum(
            -(-a.instances // t.warp_size) * (2 if a.converts else 1) for a in p.accesses
        )
        steps = self._loop_steps()
        scip.addCons(issue >= u * (base + steps + quicksum(self.instructions)) * (1e6 / issue_rate(t)))
        scip.addCons(time >= issue)
        self.roofs.append(issue)
        if p.reads_global:
            # the first-load roof (cost_model.latency_time): L * max(1, extents / (cap * prod S)).
            # prod S is a power of two, and c / x is convex: its tangents at x = 2^k, each
            # exact at its own point, bound it from below, and together they meet it at every
            # power of two: linear, with no binaries of their own (a one-hot of log2 prod S
            # tripled SCIP's time on tests/test_fold.py's band; measured)
            scip.addCons(time >= t.memory_latency_s * 1e6)  # at least one wave
            c = t.memory_latency_s * 1e6 * extents / capacity
            # with lanes 2^m warps run a thread's points: ``prod S / B`` points per busy lane
            # (B = busy_lanes(warp 2^m)), prod S - sum_m z_m (1 - 1 / B) with z_m = [m] prod S
            # (exact: [m] is a binary, prod S bounded)
            points = prod_s
            for m, var in self.uw.items():
                z = scip.addVar(f"lanes_points[{m}]", vtype="C", lb=0.0, ub=2**MAX_LOG_SEQ_TOTAL)
                scip.addCons(z <= 2**MAX_LOG_SEQ_TOTAL * var)
                scip.addCons(z <= prod_s)
                scip.addCons(z >= prod_s - 2**MAX_LOG_SEQ_TOTAL * (1 - var))
                points = points - z + z / self.p.busy_lanes(warp * 2**m)
            low = -(log2_floor(warp) + max(self.uw, default=0)) if self.p.spread else 0
            tangents = [c / 2**k - c / 4**k * (points - 2**k) for k in range(low, MAX_LOG_SEQ_TOTAL + 1)]
            for tangent in tangents:
                scip.addCons(time >= tangent)
            # blocks too small to fill an SM's thread slots hold fewer threads, so more waves:
            # the same tangents, scaled by the occupancy penalty, under each such block size
            shapes = [(occupancy_penalty(t, 2**v), var) for v, var in block.items()]
            for penalty, var in shapes + self.shared_occupancy:
                if penalty > 1:
                    for tangent in tangents:
                        scip.addConsIndicator(time - penalty * tangent >= 0, var)
        if not self.wavefronts:
            return time, traffic_time
        shared = scip.addVar("shared_us", vtype="C", lb=0.0)
        scip.addCons(shared >= u * quicksum(self.wavefronts) * (1e6 / shared_wavefront_rate(t)))
        scip.addCons(time >= shared)
        self.roofs.append(shared)
        return time, traffic_time + shared

    def _lanes(self, block: dict) -> None:
        """With lanes (``w``): no staging, no interleaved points, and the warp instructions
        lanes add (``cost_model.lane_instructions``): lane 0's requests one per instance,
        and the forks and joins."""
        scip = self.scip
        if not self.p.spread:
            return
        for scope in self.scope.values():
            scip.addCons(scope <= 1 - self.w)
        scip.addCons(self.inter <= 1 - self.w)
        p, t, warp = self.p, self.p.target, self.p.target.warp_size
        strides, points, busy = p.lane_strides(p.spread), math.prod(p.extents), p.lane_busy(p.spread)
        for m, var in self.uw.items():
            extra = lane_instructions(
                p.target, p.accesses, strides, p.spread, points, warp * 2**m, p.runs, busy
            )
            if extra:
                self.instructions.append(extra * var)
        if not p.shared_bytes:
            return
        # the shared arrays (``shared_locals.py``): their loads and stores, their wavefronts,
        # and a copy per band point of the block (a warp each: 2^v / 32 in a block of 2^v
        # threads; a block of warps, 2^(5 + m) threads: one), within the block's shared
        # memory; where they hold an SM to fewer blocks than its thread slots allow, the
        # occupancy they leave (``occupancy_penalty``) divides the fill, as the block's size
        # does: per lanes' block shape, a binary set where that shape is chosen
        self.instructions.append(sum(a.requests(warp) for a in p.shared_accesses) * self.w)
        self.wavefronts.append(sum(a.wavefronts(warp) for a in p.shared_accesses) * self.w)
        for v, var in block.items():
            for m, lanes in self.uw.items():
                if 2**v < warp * 2**m or (m > 0 and 2**v != warp * 2**m):
                    continue  # a block of several warps is one point: its threads are its lanes
                used = p.shared_arrays_bytes(warp * 2**m, 2**v)
                if used > t.shared_memory_per_block:
                    scip.addCons(var + lanes <= 1)
                    continue
                penalty = occupancy_penalty(t, 2**v, used)
                if penalty <= occupancy_penalty(t, 2**v):
                    continue  # the threads decide, as without the arrays
                shape = lanes  # a block of warps: its size is the lanes'
                if m == 0:  # blocks of 2^v threads with a warp per point: both binaries
                    shape = scip.addVar(f"lanes_block_shape[{v}]", vtype="B")
                    scip.addCons(shape >= var + lanes - 1)
                self.shared_occupancy.append((penalty, shape))

    def _loop_steps(self):
        """The loops' own instructions (``cost_model.loop_step_instructions``): per warp
        step of an innermost loop of the body, divided by ``2^max(r, u)``, ``r`` the sum of
        the log2 S_j where the points interleave (else 0) and ``2^u`` the
        ``LOOP_UNROLL_POINTS`` (an indicator binary per value of r: the smaller exponent
        costs no less, so the minimum takes the exact one)."""
        scip, p, t = self.scip, self.p, self.p.target
        if not p.loop_iterations:
            return 0
        low = log2_floor(LOOP_UNROLL_POINTS)
        once = loop_step_instructions(t, p.loop_iterations, LOOP_UNROLL_POINTS)
        r = scip.addVar("step_points_log2", vtype="I", lb=0, ub=MAX_LOG_SEQ_TOTAL)
        scip.addCons(r <= quicksum(self.ls[j] for j in range(self.n)))
        scip.addCons(r <= MAX_LOG_SEQ_TOTAL * self.inter)
        b, exponent = self._one_of("step_points_log2", range(MAX_LOG_SEQ_TOTAL + 1))
        for var in b.values():
            scip.chgVarBranchPriority(var, 10)
        scip.addCons(exponent <= r)
        return quicksum(once * 2.0 ** -max(0, m - low) * var for m, var in b.items())

    def _dram_terms(self, traffic: list, owners: list[str]) -> list:
        """The traffic terms DRAM moves (``KernelProblem.from_caches``): not a cached buffer's
        (``owners``: whose bytes each term moves), not an ``ADJACENT`` access's, and an
        ``AGAIN`` access's only where the band points in flight do not fit in L2, which
        depends on the lanes: ``F = fits(1) (1 - w) + sum_m fits(32 2^m) uw_m``, and the term
        less ``z = term * F``, exactly (``z <= term``, ``z <= most F``, ``z >= term - most (1 - F)``)."""
        p, scip, warp = self.p, self.scip, self.p.target.warp_size
        fits = float(p.reuse_fits(1)) * (1 - self.w) + quicksum(
            float(p.reuse_fits(warp * 2**m)) * var for m, var in self.uw.items()
        )
        terms, cached = [], p.cached_buffers
        for k, (term, owner) in enumerate(zip(traffic, owners)):
            kind = p.reuse[k] if k < len(p.accesses) and p.reuse else FIRST
            if owner in cached or kind == ADJACENT:
                continue
            if kind == AGAIN:
                access = p.accesses[k]
                most = access.instances * p.target.warp_size  # a sector per lane at most
                z = scip.addVar(f"from_l2[{access.statement}:{access.text}]", vtype="C", lb=0.0, ub=most)
                scip.addCons(z <= term)
                scip.addCons(z <= most * fits)
                scip.addCons(z >= term - most * (1 - fits))
                term = term - z
            terms.append(term)
        return terms

    def _objective(self, time, traffic_time) -> None:
        """The time, plus ``RANKING_WEIGHT`` times the memory and shared-memory times (mappings
        under the same roof ranked by the traffic they add), plus a tie-break far below any
        real cost difference."""
        scip, n = self.scip, self.n
        axes = list(Axis)
        same = [scip.addVar(f"same[{j},{a.value}]", vtype="B") for j in range(n) for a in axes]
        for idx, var in enumerate(same):
            j, a = divmod(idx, 3)
            scip.addCons(var <= self.ax[j, axes[a]])
            scip.addCons(var <= self.bx[j, axes[a]])
        # ties: block axes equal to thread axes, fewer points per thread, larger tiles (fewer barriers),
        # and, between mappings that cost the same, lower thread axes and blocked points, so
        # that the answer does not depend on which of the tied optima SCIP meets first
        order = quicksum(
            a.position * self.ax[j, a] + a.position * self.bx[j, a] for j in range(n) for a in axes
        )
        tie = TIE_BREAK * (
            n
            - quicksum(same)
            + quicksum(self.ls[j] for j in range(n))
            + MAX_LOG_TILE
            - self.log_tile
            + self.inter
            + self.double  # one slot where two gain nothing: half the shared memory
            # 0.03: a difference of one axis (3e-8 us) must stay above SCIP's tolerance on
            # objectives of tens of us (at 0.01, matmul_1024's i went to z instead of y), and
            # the most it can add (12 axis positions, 3 loops not blocked) below one unit of
            # the terms above; at 0.05 SCIP no longer closed the four-deep
            # band of tests/test_fold.py in 30 s
            + 0.03 * (order + quicksum(self.cyc[j] + self.grouped[j] for j in range(n)))
        )
        # with lanes, the threads of a block are often tied (a warp per point fills the GPU
        # at any block size the occupancy allows): the fewest, (w * log2 threads, linearized)
        if self.p.spread:
            laned = scip.addVar("lanes_block_log2", vtype="C", lb=0.0)
            scip.addCons(laned >= self.total_lt + self.lw - self.log_block * (1 - self.w))
            tie += TIE_BREAK * 0.03 * laned
        scip.setObjective(time + RANKING_WEIGHT * traffic_time + tie, "minimize")

    def _registers(self, scip: Model, log_points, block: dict) -> None:
        """An estimate of registers within the limits: ``KernelProblem.base_registers``, what
        the mapping adds whatever its points (each staged tile's copy, the lanes' combining),
        plus the thread's block-local elements (accumulators), each held once per s-point
        where the points interleave (all of them) or a tiled loop runs outside the s-points
        (those outside it, ``staging.py``), and where the points interleave the values a step
        reads (a fragment: ``2^m - 1`` more per read inside a seq loop, m the sum of the log2
        S_j of the loops it mentions); at most ``KernelProblem.register_limit`` per thread and
        the block's 65536 in all. Only a limit, not an occupancy cost: a thread with many
        accumulators hides latency by its independent operations, which the roofline does
        not model."""
        p, t = self.p, self.p.target
        most = p.register_limit
        # a body's own arrays may live in local memory; with lanes, the shared ones in shared
        floor = (
            p.base_registers
            + p.local_elements
            + (REGISTERS_LANES - p.shared_elements) * self.w
            + REGISTERS_PER_STAGED * quicksum(self.stage.values())
        )
        if not p.local_elements and not p.fragments:
            # the floor is the estimate: a block size limits it only where its largest value
            # could exceed the block's registers (a row each, big-M); where none can, one row
            # that always holds: with it SCIP closed tests/test_fold.py's band in 4 s, without
            # it in 8 s (measured)
            top = p.base_registers + p.most_mapped_registers
            if top > most:
                scip.addCons(floor <= most)
            limited = [v for v in block if 2**v * top > t.max_registers_per_block]
            if not limited:
                scip.addCons(
                    quicksum(2**v * var for v, var in block.items()) * top <= t.max_registers_per_block
                )
            for v in limited:
                scip.addCons(2**v * floor <= t.max_registers_per_block + 2**v * top * (1 - block[v]))
            return
        regs = scip.addVar("registers", vtype="I", lb=0, ub=most)
        # points per thread 2^m: one binary per m, linear in the per-loop log decisions
        logs, points_log = self._one_of("points_log2", range(MAX_LOG_SEQ_TOTAL + 1))
        scip.addCons(points_log == log_points)
        points = quicksum(2**m * var for m, var in logs.items())

        def copies(on, label: str):  # points - 1 where ``on``, else 0
            x = scip.addVar(f"expanded[{label}]", vtype="I", lb=0, ub=2**MAX_LOG_SEQ_TOTAL)
            scip.addCons(x >= points - 1 - 2**MAX_LOG_SEQ_TOTAL * (1 - on))
            return x

        # per-point copies: of every local and the step's fragments where the points
        # interleave, else of the locals outside the tiled loop; the larger count holds
        scip.addCons(
            regs
            >= floor
            + (p.local_elements - len(p.held)) * copies(self.inter, "interleaved")
            + self._fragments(scip)
        )
        for loop, elements in p.locals_outside:
            if loop in self.scope and elements:
                scip.addCons(regs >= floor + elements * copies(self.scope[loop], loop))
        for v, var in block.items():
            slack = 2**v * most
            scip.addCons(2**v * regs <= t.max_registers_per_block + slack * (1 - var))

    def _fragments(self, scip: Model):
        """The registers of a step's values beyond one per read, where the points interleave:
        per read (``KernelProblem.fragments``) and per held value (``KernelProblem.held``)
        ``2^m - 1`` with ``f[m] = 1`` for an m at least the sum of the log2 S_j of the loops it
        mentions (0 when not interleaved: all f are 0). A larger m only tightens the limit, so
        the exact one is always allowed."""
        position = {loop.index: j for j, loop in enumerate(self.p.kernel.band)}
        terms = []
        for r, used in enumerate(self.p.fragments + self.p.held):
            loops = [position[v] for v in used]
            if not loops:
                continue
            top = len(loops) * MAX_LOG_SEQ
            f, f_log = self._one_of(f"fragment[{r}]", range(top + 1), self.inter)
            scip.addCons(f_log >= quicksum(self.ls[j] for j in loops) - top * (1 - self.inter))
            terms.append(quicksum((2**m - 1) * var for m, var in f.items()))
        return quicksum(terms)

    def _pin(self, scip: Model, j: int, pin: LoopPin, lt, ls) -> None:
        if pin.thread_axis is not None:
            scip.addCons(self.ax[j, pin.thread_axis] == 1)
        if pin.block_axis is not None:
            scip.addCons(self.bx[j, pin.block_axis] == 1)
        if pin.threads is not None:
            scip.addCons(lt == log2_floor(pin.threads))
        if pin.seq is not None:
            scip.addCons(ls == log2_floor(pin.seq))
        if pin.distribution is not None:
            chosen = {
                Distribution.CYCLIC: self.cyc[j],
                Distribution.BLOCKED: self.blk[j],
                Distribution.GROUPED: self.grouped[j],
            }[pin.distribution]
            scip.addCons(chosen == 1)
        if pin.group == 1:
            scip.addCons(self.cyc[j] == 1)
        elif pin.group is not None:  # blocked with S = the group, or grouped by it
            g = log2_floor(pin.group)
            scip.addCons(self.blk[j] + (self.ug[j, g] if (j, g) in self.ug else 0) == 1)
            scip.addCons(ls >= g * self.blk[j])
            scip.addCons(ls <= g + MAX_LOG_SEQ * (1 - self.blk[j]))
        if pin.interleave is not None:  # the kernel's decision, pinned through one of its loops
            scip.addCons(self.inter == (1 if pin.interleave else 0))
        if pin.lanes is not None and self.p.spread:  # the kernel's too (``pin_checks.check_lane_pins``)
            scip.addCons(self.w == (1 if pin.lanes > 1 else 0))
            if pin.lanes > 1:
                scip.addCons(self.lw == log2_floor(pin.lanes) - self.log_warp)

    def check_certificates(self, scip: Model) -> int:
        """Check every Farkas certificate of SCIP's solution by exact substitution: the
        multipliers, rationalized, must be >= 0 and match every coefficient exactly. A
        failure is a bug (or a numerical breakdown in SCIP), reported loudly."""
        for access, system, variables in self.certificates:
            lams = set(system.multipliers)
            decisions = {s: round(scip.getVal(v)) for s, v in variables.items() if s not in lams}
            floats = {s: scip.getVal(v) for s, v in variables.items() if s in lams}
            if exact_certificate(system, decisions, floats) is None:
                raise CertificateError(
                    f"{self.p.kernel.name}: SCIP's Farkas certificate for the lane stride of {access.text} "
                    f"({access.statement}) does not hold exactly at {decisions}"
                )
        return len(self.certificates)

    def read(self, scip: Model) -> KernelMapping:
        band = self.p.kernel.band
        loops = []
        for j, loop in enumerate(band):
            value = scip.getVal
            thread_axis = next(a for a in Axis if value(self.ax[j, a]) > 0.5)
            block_axis = next(a for a in Axis if value(self.bx[j, a]) > 0.5)
            lt = next(k for k in range(self.log_block + 1) if value(self.ut[j, k]) > 0.5)
            ls = next(m for m in range(MAX_LOG_SEQ + 1) if value(self.us[j, m]) > 0.5)
            group = next((2**m for m in range(1, MAX_LOG_SEQ) if value(self.ug[j, m]) > 0.5), 1)
            if group > 1:
                dist = Distribution.GROUPED
            else:
                dist = Distribution.CYCLIC if value(self.cyc[j]) > 0.5 else Distribution.BLOCKED
            loops.append(
                LoopMapping(
                    loop.index,
                    thread_axis,
                    block_axis,
                    2**lt,
                    2**ls,
                    dist,
                    loop.extent,
                    self.p.extents[j],
                    group=group,
                )
            )
        staged = [c for c in self.p.candidates if scip.getVal(self.stage[c.buffer, c.loop]) > 0.5]
        staging = None
        if staged:
            loop = staged[0].loop
            tile = 1 if loop is None else 2 ** next(m for m, v in self.kappa.items() if scip.getVal(v) > 0.5)
            turned = tuple(
                c.buffer
                for c in staged
                if (c.buffer, c.loop) in self.transposed
                and scip.getVal(self.transposed[c.buffer, c.loop]) > 0.5
            )
            doubled = sum(scip.getVal(var) for var in self.kd.values())
            slots = 2 if loop is not None and doubled > 0.5 else 1
            staging = Staging(loop, tile, tuple(c.buffer for c in staged), turned, slots=slots)
        mapping = KernelMapping(self.p.kernel, tuple(loops), staging, scip.getVal(self.inter) > 0.5)
        if self.p.spread and scip.getVal(self.w) > 0.5:
            warps = 2 ** next(m for m, var in self.uw.items() if scip.getVal(var) > 0.5)
            mapping = replace(mapping, lanes=self.p.target.warp_size * warps, spread=self.p.spread)
        if staging is not None:  # the widest copies the tiles allow (``staging.copy_vectors``)
            wide = replace(
                staging, copy_vectors=copy_vectors(mapping, self.p.model.program, self.p.copy_width)
            )
            mapping = replace(mapping, staging=wide)
        return mapping
