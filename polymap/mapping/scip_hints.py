"""Start hints for a kernel's SCIP model (``ScipModel``, a mixin): plain mappings handed to
SCIP as partial solutions before it solves (``completesol`` finishes them), so that its
first incumbent is a sensible mapping rather than whatever the heuristics find first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polymap.mapping.cost_model import (
    MAX_LOG_SEQ,
    MAX_LOG_SEQ_TOTAL,
    grid_need,
    log2_floor,
)
from polymap.mapping.space import Axis

if TYPE_CHECKING:
    pass


class StartHints:
    """``ScipModel.suggest_start`` and its helpers."""

    def suggest_start(self) -> bool:
        """Hand SCIP plain mappings as partial solutions, before it solves: the innermost
        loop on x, the next on y, then z (the same axis for block and thread), about 256
        threads filled from x outwards, blocked, a point per thread unless the grid is too
        short for the loop; one with nothing staged, and where a seq loop of the body can be
        tiled, one with every candidate of the first such loop staged, about 512 threads
        (its tile, slots, layout, points per thread and their order left open). SCIP
        completes the rest of the variables
        (its completesol heuristic, before presolving) or drops a hint that violates a
        constraint; either way the optimization and its bounds stay SCIP's. Without a hint,
        SCIP can search for seconds before its first feasible point on a folded triangular
        band (fuzz seed 4368: 6300 nodes, 10 s), and a time limit then ends with no mapping
        at all; the staged hint gives a GEMM's search an incumbent near its optimum early
        (nodes over the kernels: gpt3_attention_tiny 468 -> 296, fc_bias_relu 790 -> 368,
        batched_matmul 81 -> 1; SCIP's time over models/ 44 -> 29 s on a busy host:
        docs/benchmarks/2026-11-28-staged-hint.md; with 512 threads instead of 256, nodes
        3397 -> 2555 and SCIP's time unchanged over models/, gpt3_attention_tiny 296 -> 74
        nodes: docs/benchmarks/2026-11-28-bigger-block-hint.md). Returns whether a hint was
        given: none for a pinned kernel (the pins decide)."""
        if self.pinned:
            return False
        t = self.p.target
        lt = self._thread_shares(self.log_warp if self.tiny else self.log_warp + 3)
        if lt is None:
            return False
        ls = {}
        for place, j in enumerate(reversed(range(self.n))):
            need = grid_need(self.p.extents[j], t.grid_dim_limits[place])
            ls[j] = 0 if self.tiny else max(0, need - lt[j])
        if any(m > MAX_LOG_SEQ for m in ls.values()) or sum(ls.values()) > MAX_LOG_SEQ_TOTAL:
            return False
        plain = self._hint(lt, ls)
        for st in self.stage.values():
            self.scip.setSolVal(plain, st, 0.0)
        for var in self.kd.values():
            self.scip.setSolVal(plain, var, 0.0)
        self.scip.setSolVal(plain, self.inter, 0.0)
        self.scip.addSol(plain)
        tiled = next((loop for loop in self.scope if loop is not None), None)
        if tiled is not None:
            # the points per thread open too, and the block bigger: a staged tile's reuse
            # grows with both (gpt3_attention_tiny's kernel1: 291 nodes from a 256-thread
            # hint, 70 from this one)
            bigger = None if self.tiny else self._thread_shares(self.log_warp + 4)
            staged = self._hint(lt if bigger is None else bigger, None)
            for loop, var in self.scope.items():
                self.scip.setSolVal(staged, var, 1.0 if loop == tiled else 0.0)
            for (_, loop), var in self.stage.items():
                self.scip.setSolVal(staged, var, 1.0 if loop == tiled else 0.0)
            self.scip.addSol(staged)
        # the hints fix decisions only; the multipliers and bounds (most of the variables)
        # are SCIP's to complete, beyond completesol's default share of unknowns
        self.scip.setParam("heuristics/completesol/maxunknownrate", 1.0)
        return True

    def _thread_shares(self, log_threads: int) -> dict[int, int] | None:
        """log2 of each band loop's threads for a hint of ``2 ** log_threads`` threads (at
        most the block's, and the loops' caps together), filled from the innermost loop (on
        x) outwards within each axis's limit; a tiny band gets a warp on x first. None where
        the limits leave some of them unplaced."""
        limits = [log2_floor(most) for most in self.p.target.block_dim_limits]
        left = log_threads if self.tiny else min(log_threads, self.log_block, sum(self.caps))
        lt = {}
        for place, j in enumerate(reversed(range(self.n))):
            lt[j] = min(limits[place], left) if self.tiny else min(self.caps[j], limits[place], left)
            left -= lt[j]
        return None if left else lt

    def _hint(self, lt: dict[int, int], ls: dict[int, int] | None):
        """A partial solution with each band loop's axes (the j-th innermost on the j-th
        axis, block and thread alike), log2 T, and no lanes; with ``ls``, log2 S too, and
        blocked."""
        axes = (Axis.X, Axis.Y, Axis.Z)
        hint = self.scip.createPartialSol()
        for place, j in enumerate(reversed(range(self.n))):
            for a in Axis:
                self.scip.setSolVal(hint, self.ax[j, a], 1.0 if a is axes[place] else 0.0)
                self.scip.setSolVal(hint, self.bx[j, a], 1.0 if a is axes[place] else 0.0)
            for k in range(self.log_block + 1):
                self.scip.setSolVal(hint, self.ut[j, k], 1.0 if k == lt[j] else 0.0)
            if ls is None:
                continue
            for m in range(MAX_LOG_SEQ + 1):
                self.scip.setSolVal(hint, self.us[j, m], 1.0 if m == ls[j] else 0.0)
            self.scip.setSolVal(hint, self.cyc[j], 0.0)
            self.scip.setSolVal(hint, self.blk[j], 1.0)
            for m in range(1, MAX_LOG_SEQ):
                self.scip.setSolVal(hint, self.ug[j, m], 0.0)
        if self.p.spread:
            self.scip.setSolVal(hint, self.w, 0.0)
            for var in self.uw.values():
                self.scip.setSolVal(hint, var, 0.0)
        return hint
