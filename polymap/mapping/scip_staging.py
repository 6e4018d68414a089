"""The shared-memory staging part of a kernel's SCIP model (``ScipModel``, a mixin): the
scope and tile of a tiled seq loop, which buffers are staged, their copies' traffic and
wavefronts, a transposed tile's layout, double buffering and the tiles' load time. See
``scip_model``'s docstring, "Shared-memory staging", for the model as a whole.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pyscipopt import Model, quicksum

from polymap.mapping.accesses import GlobalAccess
from polymap.mapping.cost_model import (
    MAX_LOG_SEQ,
    MAX_LOG_TILE,
    PADDING,
    copy_instructions,
    log2_floor,
    mentioned_loops,
    most_blocks,
    reuse_loops,
    shared_capacity,
    shared_wavefronts,
    span_blocks,
    tile_count,
    tile_latency,
    tile_store_wavefronts,
    transposed_store_wavefronts,
)
from polymap.mapping.space import Axis, Pins, merge_pins
from polymap.mapping.staging import (
    ASYNC_ELEMENT_BYTES,
    ROW_ELEMENTS,
    VECTOR_BYTES,
    shared_order,
    wide_row_log2,
)

if TYPE_CHECKING:
    pass


class StagingConstraints:
    """The staging constraints of ``ScipModel``, which holds the state they read and set
    (``p``, the decisions, ``scope``, ``stage``, ``transposed``, ``wavefronts``)."""

    def _staging(self, scip: Model, pins: Pins, traffic: list, p_log: dict, block: dict) -> list:
        """Shared-memory staging (``staging.py``): a binary per scope (a tileable seq loop or
        the whole body; at most one), the tile ``K = 2^kappa``, and per candidate buffer a
        binary ``st``. A staged buffer's reads in the scope cost nothing from global memory;
        its copies move ``e * prod N_j * N_L * 2^-(sum of log2 T_j S_j over the band loops
        its tile does not follow)`` bytes (an indicator per value of that sum); its tile of
        ``e * 2^(sum of the logs of the widths)`` bytes (padded) counts against
        ``shared_capacity``, and its rows are at least a sector wide. Returns the traffic
        terms with those of the staged reads switched off."""
        p, t = self.p, self.p.target
        kname = p.kernel.name
        scope_extent = dict(p.scope_extents)
        self.scope, self.stage, self.transposed = {}, {}, {}
        self.wavefronts = []  # shared-memory wavefronts: staged reads and the tiles' stores
        self.instructions = []  # warp instructions beyond one per global request and FMA
        kappa_values = range(MAX_LOG_TILE + 1)
        self.kappa, self.log_tile = self._one_of("tile_log2", kappa_values)
        self.shared_used = None  # the tiles' bytes, double-buffered ones twice
        if not p.candidates:
            self.double, self.kd = 0, {}  # nothing staged: nothing to double-buffer
            return traffic
        for c in p.candidates:
            if c.loop not in self.scope:
                self.scope[c.loop] = scip.addVar(f"scope[{c.loop or 'body'}]", vtype="B")
        scip.addCons(quicksum(self.scope.values()) <= 1)
        if None in self.scope:  # the whole body is one tile: K = 1
            scip.addCons(self.log_tile <= MAX_LOG_TILE * (1 - self.scope[None]))
        for loop, extent in scope_extent.items():
            if loop in self.scope:
                cap = max(0, math.ceil(math.log2(extent))) if extent > 1 else 0
                scip.addCons(self.log_tile <= cap + MAX_LOG_TILE * (1 - self.scope[loop]))
        self._double_buffering(scip, pins)
        for loop in self.scope:
            if loop is None:
                continue
            pin = merge_pins(pins.for_loop(kname, loop))
            if pin.tile is not None:
                scip.addCons(self.log_tile == log2_floor(pin.tile))
            if pin.stage is not None:
                scip.addCons(self.scope[loop] == (1 if pin.stage else 0))
        shared_terms = []
        for c in p.candidates:
            st = scip.addVar(f"stage[{c.buffer}@{c.loop or 'body'}]", vtype="B")
            self.stage[c.buffer, c.loop] = st
            scip.addCons(st <= self.scope[c.loop])
            for j, loop in enumerate(p.kernel.band):
                if loop.index in c.per_block:  # one iteration per block: T = S = 1 where staged
                    scip.addCons(self.lt[j] + self.ls[j] <= (self.log_block + MAX_LOG_SEQ) * (1 - st))
            if c.loop is not None:
                pin = merge_pins(pins.for_loop(kname, c.loop))
                if pin.stage is not None:
                    scip.addCons(st == (1 if c.buffer in pin.stage else 0))
            width_log = {v: (self.log_tile if v == c.loop else p_log[v]) for v in c.loops}
            # the buffer's rows in the tile at least one 32-byte sector (the copy reads them
            # coalesced); the shared rows at least 8 elements (``StagedBuffer.padded``): the
            # same rows unless transposed, where ``_transposed`` asks 128 bytes of the others
            row = max(0, math.ceil(math.log2(t.sector_bytes / c.element_bytes)))
            scip.addCons(width_log[c.dims[-1]] >= row * st)
            tr = self._transposed(scip, pins, c, st, width_log)
            scip.addCons(width_log[c.dims[-1]] >= log2_floor(ROW_ELEMENTS) * (st - (0 if tr is None else tr)))
            # global traffic of the copies
            outside = [v for v in p.kernel.indices if v not in c.dims]
            top = len(outside) * (self.log_block + MAX_LOG_SEQ)
            full = self.p.staged_bytes(c, dict.fromkeys(p.kernel.indices, 1))
            # y[m] = 1 for m = sum of the logs (when staged; all 0 otherwise): a smaller m means
            # more traffic, so the minimum takes the largest m allowed, the exact one
            y, y_log = self._one_of(f"outlog[{c.buffer}]", range(top + 1), st)
            scip.addCons(y_log <= quicksum(p_log[v] for v in outside))
            copied = quicksum(full * 2.0**-m * var for m, var in y.items())
            traffic.append(copied)
            self.wavefronts.append(tile_store_wavefronts(t, 1.0, c.element_bytes) * copied)
            if tr is not None:  # a transposed tile's stores meet bank conflicts: the difference
                extra = transposed_store_wavefronts(t, 1.0, c.element_bytes) - tile_store_wavefronts(
                    t, 1.0, c.element_bytes
                )
                # per value of the copies' log, y[m] and tr: binaries, so that the roof's
                # product with the fill stays a product of a continuous and binaries
                both = {m: scip.addVar(f"transposed_outlog[{c.buffer}]={m}", vtype="B") for m in y}
                for m, var in both.items():
                    scip.addCons(var >= y[m] + tr - 1)
                self.wavefronts.append(quicksum(extra * full * 2.0**-m * var for m, var in both.items()))
            # the copy's loads in vectors: every tile the model allows has rows of 32 bytes
            vector = p.copy_width(c)
            self.instructions.append(copy_instructions(t, 1.0, c.element_bytes, vector) * copied)
            # the staged reads leave global memory for shared memory
            for k, a in enumerate(p.accesses):
                if c.serves(a.statement, a.buffer, a.is_write):
                    loads, served, reads = self._staged_reads(scip, a, c, st, tr)
                    self.wavefronts.append(shared_wavefronts(t, a.element_bytes) * served)
                    # a shared load where staged, a global one (counted in _time) where not
                    requests = -(-a.instances // t.warp_size)
                    self.instructions.append(loads - requests * st)
                    if a.converts:  # a conversion per value read, no longer per request
                        self.instructions.append(reads - requests * st)
                    sectors = self.sectors[k]
                    left = scip.addVar(
                        f"sigma_global[{a.statement}:{a.text}]", vtype="I", lb=0, ub=t.warp_size
                    )
                    scip.addCons(left >= sectors - t.warp_size * st)  # 0 when staged
                    traffic[k] = a.instances * left
            # shared memory of the tile
            widths = quicksum(width_log.values())
            top_w = sum(self.log_block + MAX_LOG_SEQ for v in c.loops if v != c.loop)
            top_w += MAX_LOG_TILE if c.loop in c.dims else 0
            # z[m] = 1 for m >= the log of the tile's elements (when staged; all 0 otherwise)
            z, z_log = self._one_of(f"tilelog[{c.buffer}]", range(top_w + 1), st)
            scip.addCons(z_log >= widths - top_w * (1 - st))
            shared_terms.append(quicksum(c.element_bytes * PADDING * 2.0**m * var for m, var in z.items()))
        # double buffering needs a staged tile, and copies cp.async can make: 4- or 8-byte elements
        # (a 1- or 2-byte element is stored at once, and its wait would not overlap anything)
        tiled = [c for c in p.candidates if c.loop is not None]
        scip.addCons(self.double <= quicksum(self.stage[c.buffer, c.loop] for c in tiled))
        for c in tiled:
            if c.element_bytes not in ASYNC_ELEMENT_BYTES:
                scip.addCons(self.stage[c.buffer, c.loop] + self.double <= 1)
        # double buffering holds every tile twice: the tiles' bytes again where ``double``
        tiles = quicksum(shared_terms)
        again = scip.addVar("double_buffered_bytes", vtype="C", lb=0.0)
        scip.addCons(again >= tiles - t.shared_memory_per_block * (1 - self.double))
        # its capacity reads the block span, which ``_time`` makes (``_shared_capacity``)
        self.shared_used = tiles + again
        return traffic

    def _shared_capacity(self, scip: Model, used, block: dict) -> None:
        """``used <= shared_capacity(threads, blocks)``: the SM's shared memory over the blocks
        it must hold (``cost_model.resident_blocks``), the fewer of what the block's thread
        count allows and what the grid gives each SM (for the block span's ``m``, the most
        blocks any split of ``2^m`` over the loops launches: ``cost_model.most_blocks``).
        As the share falls with the count, it is the larger of the two shares: per span,
        ``used <= grid's + sum_v max(0, threads' - grid's) [v]`` (the block size's one-hot
        ``[v]``), switched off where the span is not ``m`` (``used`` is at most the per-block
        limit anyway); and, valid for every choice, ``used`` at most the two shares'
        sum. Added after ``_time``, which makes the span's one-hot. Measured: the per-span rows
        alone left fc_bias_relu's incumbent short of the optimum at 30 s, a binary choosing
        between the shares left gpt3_attention's third GEMM so, and the span's one-hot made
        before the staging left tests/test_fold.py's band unproved at 30 s; as here, every GEMM
        of models/ is proved optimal in under 3 s and that band in 10 s (9 s before).
        """
        t = self.p.target
        every_slot = t.sm_count * t.max_blocks_per_sm  # blocks enough that the slots decide
        by_threads = {v: shared_capacity(t, 2**v, every_slot) for v in block}
        extents = self.p.extents
        most = most_blocks(extents, self.caps)
        by_grid = {m: shared_capacity(t, 1, span_blocks(most, extents, m)) for m in self.span}
        big = t.shared_memory_per_block
        scip.addCons(used <= big)
        for m, var in self.span.items():
            more = quicksum(max(0, by_threads[v] - by_grid[m]) * block[v] for v in block)
            scip.addCons(used <= by_grid[m] + more + (big - by_grid[m]) * (1 - var))
        scip.addCons(
            used
            <= quicksum(c * block[v] for v, c in by_threads.items())
            + quicksum(c * self.span[m] for m, c in by_grid.items())
        )

    def _double_buffering(self, scip: Model, pins: Pins) -> None:
        """The binary ``double``: the tiled loop's tiles in two slots, the next tile's copy in
        flight while the block computes on this one (``Staging.slots``); only with a tiled
        loop as the scope (one tile has no next). As binaries ``kd[m] <= kappa[m]`` per tile
        exponent (double-buffered tiles of 2^m), so that ``kappa[m] - kd[m]`` is the
        single-buffered tile, exactly and linearly (``_tile_loads``). Its bytes are in
        ``_staging``'s capacity."""
        kname = self.p.kernel.name
        tiled = [loop for loop in self.scope if loop is not None]
        # only where some tiled loop has two tiles or more at that size: one tile has no next
        extents = dict(self.p.scope_extents)
        several = {m for m in self.kappa if any(tile_count(extents[loop], 2**m) > 1 for loop in tiled)}
        self.kd = {
            m: scip.addVar(f"double_buffered[tile_log2={m}]", vtype="B", ub=1 if m in several else 0)
            for m in self.kappa
        }
        for m, var in self.kd.items():
            scip.addCons(var <= self.kappa[m])
        self.double = quicksum(self.kd.values())
        scip.addCons(self.double <= quicksum(self.scope[loop] for loop in tiled))
        for loop in tiled:
            pin = merge_pins(pins.for_loop(kname, loop))
            if pin.slots is not None:
                scip.addCons(self.double == (1 if pin.slots == 2 else 0))
                if pin.slots == 2:
                    scip.addCons(self.scope[loop] == 1)

    def _tile_loads(self, time) -> None:
        """The tile-loads roof (``cost_model.tile_latency``) of a tiled staged kernel: each step
        of its tile loop waits for a tile's loads, a memory latency ``L``, so ``time >= L *
        tiles`` either way; single-buffered the block copies a tile only after computing the one
        before, so the waits add to the other roofs (``time >= roof + L * tiles`` for each),
        while double-buffered the next tile's copy is in flight during the compute. Linear in
        the tile's one-hot (``kappa``, and ``kd`` double-buffered), switched off by the big-M
        of the waits where the loop is not the scope."""
        scip, p, t = self.scip, self.p, self.p.target
        extents = dict(p.scope_extents)
        for loop, scope in self.scope.items():
            if loop is None:
                continue
            counts = {m: tile_count(extents[loop], 2**m) for m in self.kappa}
            waits = {m: tile_latency(t, n) * 1e6 if n > 1 else 0.0 for m, n in counts.items()}
            most = max(waits.values())
            if not most:
                continue
            scip.addCons(time >= quicksum(w * self.kappa[m] for m, w in waits.items()) - most * (1 - scope))
            added = scip.addVar(f"single_buffered_waits[{loop}]", vtype="C", lb=0.0)
            single = quicksum(w * (self.kappa[m] - self.kd[m]) for m, w in waits.items())
            scip.addCons(added >= single - most * (1 - scope))
            for roof in self.roofs:
                scip.addCons(time >= roof + added)

    def _transposed(self, scip: Model, pins: Pins, c, st, width_log: dict):
        """The layout decision of a candidate whose tile can be transposed
        (``StageCandidate.transposable``): a binary, only where staged, with rows (the
        second-to-last dimension's width) of at least 128 bytes, so that their padding to an
        odd number of 16-byte chunks stays within ``PADDING``. None for any other tile."""
        if not c.transposable:
            return None
        tr = scip.addVar(f"transposed[{c.buffer}@{c.loop or 'body'}]", vtype="B")
        self.transposed[c.buffer, c.loop] = tr
        scip.addCons(tr <= st)
        scip.addCons(width_log[c.dims[-2]] >= wide_row_log2(c.element_bytes) * tr)
        if c.loop is not None:
            pin = merge_pins(pins.for_loop(self.p.kernel.name, c.loop))
            if pin.transpose is not None:
                scip.addCons(tr == (1 if c.buffer in pin.transpose else 0))
        return tr

    def _staged_reads(self, scip: Model, a: GlobalAccess, c, st, tr):
        """The shared-load instructions of one staged read, the wavefronts they take and the
        reads, in warp reads of one value (``cost_model.shared_read_cost`` is the same for
        concrete decisions):

        * reads: one per 32 instances; where the points interleave, divided by the points
          that share each value (``2^r``, r the sum of the log2 S_j of the loops the read does
          not mention);
        * loads: the reads divided further by the points one vector load serves
          (``staging.read_vector``: ``2^w``, w at most log2 S of the loop of the tile's rows,
          0 unless that loop is blocked, the points interleave and the rows are 128 bytes
          or more, at most log2 of 16 bytes of elements);
        * wavefronts: a broadcast (no loop the read mentions on x) takes one per load; else
          one per read times ``2^c``, ``c = max(0, log2 bank_factor - w)`` for the loop on x
          and the layout (``cost_model.bank_factor``); and at least one per read where the
          warp wraps into y.

        Each power of two is an indicator binary per value of its exponent, whose sum the
        decisions bound: the smaller exponent costs more, so the minimum takes the exact
        one. Every big-M is on the exponents, small integers: ``full`` reaches 10^11 on the
        largest models, where a big-M on the counts times SCIP's tolerance is worth whole
        wavefronts, and the counts stay linear in binaries for their product with the fill."""
        t = self.p.target
        full = -(-a.instances // t.warp_size)
        band = self.p.kernel.band
        position = {loop.index: j for j, loop in enumerate(band)}
        loops = [position[v] for v in reuse_loops(a, self.p.kernel.indices)]
        mentioned = mentioned_loops(a, self.p.kernel.indices)
        layouts = [(False, 1)] if tr is None else [(False, 1 - tr), (True, tr)]
        if not loops and not mentioned:
            return full * st, full * st, full * st
        tag = f"{a.statement}:{a.text}"
        chunk = max(1, VECTOR_BYTES // a.element_bytes)
        widest = log2_floor(chunk)
        cap = log2_floor(t.warp_size // shared_wavefronts(t, a.element_bytes))
        top = len(loops) * MAX_LOG_SEQ
        # r: the log2 of the points that share a read, 0 unless the points interleave
        r = scip.addVar(f"reuse_log2[{tag}]", vtype="I", lb=0, ub=top)
        scip.addCons(r <= quicksum(self.ls[j] for j in loops))
        scip.addCons(r <= top * self.inter)

        def power(name: str, low: int, high: int, exponent):
            """full * 2^-m where staged, with m at most ``exponent``; 0 where not (and then
            the exponent is free: a buffer not staged has no reads to bound)."""
            b, b_log = self._one_of(f"{name}[{tag}]", range(low, high + 1), st)
            scip.addCons(b_log <= exponent + (high - low) * (1 - st))
            return quicksum(full * 2.0**-m * var for m, var in b.items())

        reads = power("reuselog", 0, top, r)
        # per layout: the vector exponent of its rows, and whether they keep the alignment
        vector, aligned = {}, {}
        for flag, on in layouts:
            row = c.row_loop(flag)
            aligned[flag] = on if flag else 0
            if row is None or row == c.loop:
                vector[flag] = 0
                continue
            j = position[row]
            w = scip.addVar(f"vector_log2[{tag}@{row}]", vtype="I", lb=0, ub=widest)
            scip.addCons(w <= self.ls[j])
            # a vector reads one group of neighbouring points: at most S blocked, V grouped
            scip.addCons(w <= widest * self.blk[j] + self.lg[j])
            scip.addCons(w <= widest * on)
            scip.addCons(w <= widest * self.inter)
            wide = scip.addVar(f"vector_rows[{tag}@{row}]", vtype="B")  # w > 0
            scip.addCons(w <= widest * wide)
            scip.addCons(wide <= w)
            scip.addCons(self.lt[j] + self.ls[j] >= wide_row_log2(a.element_bytes) * wide)
            vector[flag] = w
            if not flag:
                aligned[flag] = wide
        w_all = quicksum(vector.values())  # one layout holds: the other's w is 0
        loads = power("loadlog", 0, top + widest, r + w_all) if widest else reads
        most = top + widest + cap
        exponent = scip.addVar(f"served_log2[{tag}]", vtype="I", lb=-cap, ub=top + widest)
        scip.addCons(exponent <= r + w_all)  # a wavefront per load at least
        # a warp that wraps into y reads a row per y thread: a wavefront per read at least
        # (an upper bound: ``cost_model.shared_read_cost`` says the same)
        scip.addCons(exponent <= r + most * (1 - self.wrapped))
        for v in mentioned:
            if v in c.per_block:
                continue  # one iteration per block where staged: no lane steps along it
            j = position[v]
            # log2 of the lanes' step along v: log2 S where blocked, V's where grouped, 0 where
            # cyclic (a bound from below: the conflicts grow with it)
            delta = scip.addVar(f"step_log2[{tag}@{v}]", vtype="I", lb=0, ub=MAX_LOG_SEQ)
            scip.addCons(delta >= self.ls[j] - MAX_LOG_SEQ * (1 - self.blk[j]))
            scip.addCons(delta >= self.lg[j])
            for flag, on in layouts:
                order = shared_order(c.dims, flag)
                at = order.index(v)
                conflict = scip.addVar(f"conflict_log2[{tag}@{v},{int(flag)}]", vtype="I", lb=0, ub=cap)
                if at == len(order) - 1:  # along the rows
                    scip.addCons(conflict >= delta - vector[flag])
                elif at == len(order) - 2:  # down a column: at most ``cap``
                    over = scip.addVar(f"conflict_capped[{tag}@{v},{int(flag)}]", vtype="B")
                    big = MAX_LOG_SEQ + widest + cap
                    scip.addCons(conflict >= delta + widest * aligned[flag] - vector[flag] - big * over)
                    scip.addCons(conflict >= cap - vector[flag] - big * (1 - over))
                else:  # further out: every lane in one bank
                    scip.addCons(conflict >= cap - vector[flag])
                # lanes along loop v (on x) in this layout: 2^c wavefronts per read
                along = scip.addVar(f"lanes_along[{tag}@{v},{int(flag)}]", vtype="B")
                scip.addCons(along >= self.ax[j, Axis.X] + on - 1)
                scip.addCons(exponent <= r - conflict + most * (1 - along))
        served = power("servedlog", -cap, top + widest, exponent)
        return loads, served, reads
