"""What optimize returns: the concrete decisions, the cost they are predicted to have, and
SCIP's own account of the solve."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polymap.ir.nodes import Program
from polymap.mapping.outcome import Outcome, SolveReport
from polymap.mapping.proof import VerificationReport
from polymap.mapping.space import KernelMapping
from polymap.targets import GpuTarget

if TYPE_CHECKING:
    from polymap.transform.split import Split

# The roofline time is the largest roof only, so every mapping under the same binding roof
# costs the same however much DRAM or shared-memory traffic it adds (matmul_1024 under its
# shared-memory roof: j or i on x, 64 or 90 us of DRAM time). SCIP's objective adds this share
# of the memory and shared-memory times to rank such mappings; the report prints both numbers.
# 1% of a roof's time is a hundred times SCIP's relative gap (1e-4), so the ranking survives it.
RANKING_WEIGHT = 0.01


def given_report() -> SolveReport:
    """The solver's entry for a kernel whose decisions were given to ``compile``: SCIP did
    not run (no status, objective or bound), ``Outcome.GIVEN``."""
    return SolveReport("", 0.0, None, -math.inf, None, 0, Outcome.GIVEN)


@dataclass(frozen=True, slots=True)
class AccessCost:
    """One global-memory access of a kernel under the chosen mapping."""

    statement: str
    access: str  # as written, e.g. "B[k, j]"
    is_write: bool
    lane_stride: int  # elements between neighbouring lanes of a warp (bounded over the domain)
    sectors_per_request: int  # 32-byte sectors one warp request touches (1..32)
    requests: int  # warp requests (instances / 32, or per busy lanes; a shared read: per value points share)
    bytes: int  # sectors_per_request * 32 * requests (0 for a read served from shared memory)
    from_shared: bool = False  # a staged read: served from the shared-memory tile
    # a read of a buffer that stays in L2 (``caching``): its bytes are the caches', and DRAM
    # moves the buffer's footprint once
    cached: bool = False


@dataclass(frozen=True, slots=True)
class KernelCost:
    kernel: str
    accesses: tuple[AccessCost, ...]
    flops: int
    threads: int  # threads launched (all blocks)
    blocks: int
    threads_per_block: int
    fill: float  # fraction of the GPU's resident threads the launch fills (<= 1)
    memory_s: float
    compute_s: float
    # max(max(memory, compute, shared, issue) / fill (+ tile loads), latency, tile loads, atomics)
    time_s: float
    launches: int  # host-loop iterations launching it
    shared_bytes: int = 0  # shared memory per block (staged tiles, padding included)
    registers: int = 0  # the model's estimate of registers per thread
    shared_s: float = 0.0  # shared-memory wavefronts (staged reads, tile stores) at the SMs' rate
    # what SCIP's objective adds to time_s to rank mappings under the same roof:
    # RANKING_WEIGHT (1%) of the memory time (DRAM, or the caches' where higher) and the
    # shared-memory time, divided by the fill
    ranking_s: float = 0.0
    # warp instructions issued (an FMA per two flops, a load or store per warp request, the
    # copies' loads and stores) at the GPU's issue rate: one per scheduler and clock
    issue_s: float = 0.0
    # the first-load roof (cost_model.latency_time): the memory latency per wave of threads
    latency_s: float = 0.0
    # the tile-loads roof (cost_model.tile_latency): a memory latency per tile of a tiled
    # staged kernel; added to the other roofs where each tile is copied after the one before
    # is computed, overlapping them where double-buffered (``tile_loads_overlap``)
    tile_latency_s: float = 0.0
    tile_loads_overlap: bool = False
    # the atomics roof (cost_model.atomic_time): one element's atomic updates in a row
    atomic_s: float = 0.0
    # the caches' roof, where the kernel reads a buffer that stays in L2 (``caching``): all
    # its global traffic at ``GpuTarget.cache_bandwidth``; 0 where it reads none
    cache_s: float = 0.0
    # (buffer, bytes) of each buffer read that stays in L2: DRAM moves these bytes once
    cached: tuple[tuple[str, int], ...] = ()
    # the accesses (``read Y[i, j] (S4)``) the caches serve because their band point touched the
    # elements before (``caching.touched_before``); a write among them merges with the one before
    reused: tuple[str, ...] = ()
    # of ``cached``, the buffers held in L2 only over a window of neighbouring band points
    # (``caching.window_footprints``)
    windowed: tuple[str, ...] = ()

    @property
    def objective_s(self) -> float:
        """The kernel's term of SCIP's objective, its tie-breaks aside: TIE_BREAK (1e-6 us, a
        picosecond) per unit of the ties SCIP ranks (a few units; ``ScipModel``'s objective),
        so SCIP's objective may exceed this by some picoseconds."""
        return self.time_s + self.ranking_s

    def roofs(self) -> list[tuple[str, float]]:
        """The roofs in seconds, as the report and the emitted header list them: memory (DRAM),
        compute and issue, then the caches, shared memory and the first loads where the kernel
        has them."""
        named = [("memory", self.memory_s), ("compute", self.compute_s), ("issue", self.issue_s)]
        if self.cache_s:
            named.append(("caches", self.cache_s))
        if self.shared_s:
            named.append(("shared memory", self.shared_s))
        if self.latency_s:
            named.append(("first loads", self.latency_s))
        if self.tile_latency_s:
            named.append(("tile loads", self.tile_latency_s))
        if self.atomic_s:
            named.append(("atomics", self.atomic_s))
        return named

    def roofs_text(self) -> str:
        """``memory 1.2 us, compute 0.3 us, ...``: each roof of ``roofs`` in microseconds."""
        how = " (overlapped: double-buffered)" if self.tile_loads_overlap else " (added to the roofs above)"
        return ", ".join(
            f"{name} {seconds * 1e6:.4g} us{how if name == 'tile loads' else ''}"
            for name, seconds in self.roofs()
        )

    @property
    def bound_by(self) -> str:
        """The roof that sets ``time_s``: ``memory``, ``compute``, ``issue``, ``shared memory``
        (each divided by the fill; ``... + tile loads`` where a single-buffered kernel's tile
        waits add to it), ``first loads`` or ``tile loads`` (double-buffered)."""
        latencies = ("first loads", "tile loads", "atomics")
        divided = [(name, seconds) for name, seconds in self.roofs() if name not in latencies]
        name, seconds = max(divided, key=lambda roof: roof[1])
        highest = seconds / self.fill
        if self.tile_latency_s and not self.tile_loads_overlap:  # the tiles' waits add to it
            highest, name = highest + self.tile_latency_s, f"{name} + tile loads"
        candidates = [(highest, name), (self.latency_s, "first loads")]
        if self.tile_loads_overlap:
            candidates.append((self.tile_latency_s, "tile loads"))
        candidates.append((self.atomic_s, "atomics"))
        return max(candidates, key=lambda c: c[0])[1]  # the first of ties: the roofs


@dataclass(frozen=True, slots=True)
class BandChoice:
    """Which three loops of a band deeper than three par loops, left unfolded because its
    sizes are symbolic, get the hardware axes (``pipeline.choose_band_axes``): SCIP mapped
    the program once per choice; ``options`` holds, per choice, the loops with axes (in the
    band's order), SCIP's objective for the whole program in seconds (its kernels' objectives
    times their launches; None where no mapping was found) and, where none was, why; the
    cheapest, ``chosen``, is the mapping."""

    indices: tuple[str, ...]
    options: tuple[tuple[tuple[str, ...], float | None, str], ...]
    chosen: int

    def describe(self) -> str:
        """One line for the report."""
        axes = self.options[self.chosen][0]
        inside = [i for i in self.indices if i not in axes]
        costs = options_text(
            ((", ".join(loops), objective, why) for loops, objective, why in self.options), self.chosen
        )
        return (
            f"deep band {', '.join(self.indices)} (sizes symbolic, so not folded): {', '.join(axes)} get the "
            f"hardware axes and {', '.join(inside)} run{'s' if len(inside) == 1 else ''} inside each thread, "
            f"the cheapest of {len(self.options)} choices by SCIP's objective: {costs}"
        )


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """Whether and how a reduction loop is split into parts (``transform.split``,
    ``split_choice.choose_splits``): the loop's index and its statement (as written in the
    program the choice was made on), the accumulator, and per option (the unsplit program
    first, then each split mapped by SCIP) its description, SCIP's objective for the whole
    program in seconds (None where no mapping was found) and, where none was, why; the
    cheapest, ``chosen``, is the mapping (0: not split). ``position``, ``split`` and
    ``extent`` replay the rewrite (``prove.mapped_program``); ``reorders``: a float sum
    whose order a split changes; ``pinned``: the parts came from a ``split`` pin."""

    loop: str
    statement: str
    target: str
    options: tuple[tuple[str, float | None, str], ...]
    chosen: int
    position: int
    split: Split | None
    extent: int
    reorders: bool
    op: str  # the accumulator's operator, ``+=``
    pinned: bool = False
    proof: str = ""  # what isl proved of the rewrite (``prove_split``), for a split taken
    # an online sum's sums, kept relative to ``target``, its running maximum
    # (``transform.split_online``); empty for a plain accumulator
    online: tuple[str, ...] = ()

    def describe(self) -> str:
        """The report's line (and, for a split taken, a second line with its proof)."""
        costs = options_text(self.options, self.chosen)
        found = [k for k, option in enumerate(self.options) if option[1] is not None]
        cheapest = min(found, key=lambda k: self.options[k][1])
        if self.pinned:
            how = "pinned"
        elif self.chosen == cheapest:
            how = f"the cheapest of {len(self.options)} by SCIP's objective"
        else:  # a split cheaper by too little to be worth its second kernel
            how = f"of {len(self.options)} by SCIP's objective, the cheapest split saving too little of its kernel's"
        if self.split is None:
            return f"reduction loop '{self.loop}' ({self.statement}) not split, {how}: {costs}"
        combined = "no combine kernel" if self.split.atomic else "partial results combined by a second kernel"
        return (
            f"reduction loop '{self.loop}' ({self.statement}) split into {self.split.describe(self.extent)}, "
            f"{combined}, {how}: {costs}; {self.order()}\n  proved by {self.proof}"
        )

    def order(self) -> str:
        """What a split taken does to the order of the updates, for the report and the header."""
        if self.reorders and self.split is not None and self.split.atomic:
            return (
                f"reorders the float {self.op} into '{self.target}' in an order that varies from run to run "
                "(atomic updates: deterministic=False)"
            )
        keeps = "(reassociate=False or --no-reassociate keeps the program's order)"
        if self.online:
            sums = ", ".join(f"'{name}'" for name in self.online)
            return (
                f"reorders the float sums {sums} kept relative to the running maximum '{self.target}' {keeps}"
            )
        if self.reorders:
            return f"reorders the float {self.op} into '{self.target}' {keeps}"
        return f"exact for '{self.target}' (it combines in any order)"


@dataclass(frozen=True, slots=True)
class ScanChoice:
    """Whether a select scan (``transform.scans``: an argmax's position moved by a select
    beside its running maximum) runs as written or as exact passes of ``min=``/``max=``
    (``scan_choice.choose_scans``): its loop, its statements (as written in the program the
    choice was made on), and per option (as written first, then the passes) its
    description, SCIP's objective for the whole program in seconds (None where no mapping
    was found) and, where none was, why; ``chosen`` is the mapping (0: as written).
    ``path`` replays the rewrite (``prove.mapped_program``); ``pinned``: a ``passes`` pin
    chose; ``proof``: what isl proved of the loop that lets it be rewritten."""

    loop: str
    statement: str
    options: tuple[tuple[str, float | None, str], ...]
    chosen: int
    path: tuple[int, ...]
    pinned: bool = False
    proof: str = ""

    @property
    def rewritten(self) -> bool:
        return self.chosen != 0

    def describe(self) -> str:
        """The report's line (and, for a rewrite taken, a second line with what isl proved)."""
        how = "pinned" if self.pinned else f"the cheaper of {len(self.options)} by SCIP's objective"
        costs = options_text(self.options, self.chosen)
        if not self.rewritten:
            return f"select scan '{self.loop}' ({self.statement}) as written, {how}: {costs}"
        return (
            f"select scan '{self.loop}' ({self.statement}) as exact min=/max= passes, {how}: {costs}; "
            f"the same result for every input (docs/mapping.md, 'An argmax as exact passes')\n"
            f"  proved by isl: {self.proof}"
        )


def options_text(options, chosen: int) -> str:
    """``what 1.2 us; what no mapping (why) (taken); ...``: each option SCIP mapped, with its
    objective in microseconds or why it has none, and which was taken."""
    return "; ".join(
        f"{what} "
        + (f"{objective * 1e6:.4g} us" if objective is not None else f"no mapping ({why})")
        + (" (taken)" if k == chosen else "")
        for k, (what, objective, why) in enumerate(options)
    )


@dataclass(frozen=True, slots=True)
class FusionTried:
    """A program ``fuse_if="fastest"`` mapped, or a way of linking it left out: ``links`` are
    the ways of linking the chain's intermediates whose plans made the program (``"Q=tiled,
    S=dram"``; the plan with the links free is ``"free: "`` and the links it chose), for the
    program as written those whose plans fuse nothing a tile at a time; ``predicted_s`` its
    predicted time (None where left out, ``left_out`` saying why); ``taken`` whether it is
    the program mapped."""

    links: tuple[str, ...]
    predicted_s: float | None
    as_written: bool = False
    taken: bool = False
    left_out: str = ""

    def label(self) -> str:
        """As the report's note names it."""
        if self.as_written:
            plans = f", which {len(self.links)} of the plans make{'s' if len(self.links) == 1 else ''} too"
            return "as written" + (plans if self.links else "")
        return " or ".join(
            f"the plan of fewest bytes ({links.removeprefix('free: ')})"
            if links.startswith("free: ")
            else links
            for links in self.links
        )

    def to_json(self) -> dict:
        return {
            "links": list(self.links),
            "as_written": self.as_written,
            "predicted_s": self.predicted_s,
            "taken": self.taken,
            "left_out": self.left_out or None,
        }


@dataclass(frozen=True, slots=True)
class FusionSummary:
    """What ``fuse`` chose for a mapped program (``polymap.fused.FusionChoice.summary``):
    the capacity planned within, whether the program mapped is the fused one, the fused
    program's name (None where the plan rewrote nothing), the cost model's predicted time
    of each where both were mapped to compare, why they were not compared, the line the
    report gives, the links pinned and the sizes the plan was made at (a fused program's
    are numbers in it)."""

    capacity: str
    fused: bool
    planned: str | None
    predicted_fused_s: float | None
    predicted_as_written_s: float | None
    not_compared: str | None
    note: str
    links: tuple[tuple[str, str], ...] = ()  # the plan's pinned intermediates
    sizes: tuple[tuple[str, int], ...] = ()  # the sizes the plan was made at
    min_band_tiles: int = 1  # the fewest band tiles a segment fused a tile at a time has
    # with fuse_if="fastest": each program mapped, and each way of linking left out
    tried: tuple[FusionTried, ...] = ()
    # each plan SCIP did not prove optimal within its time limit, with its status and gap
    unproved: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "capacity": self.capacity,
            "fused": self.fused,
            "planned_program": self.planned,
            "predicted_fused_s": self.predicted_fused_s,
            "predicted_as_written_s": self.predicted_as_written_s,
            "not_compared": self.not_compared,
            "links": dict(self.links),
            "plan_sizes": dict(self.sizes),
            "min_band_tiles": self.min_band_tiles,
            "note": self.note,
            "tried": [t.to_json() for t in self.tried],
            "plans_not_proved_optimal": list(self.unproved),
        }


@dataclass(frozen=True, slots=True)
class Mapping:
    """A mapped program: one KernelMapping per kernel, its predicted cost, SCIP's report
    per kernel, and the sizes the cost was estimated at (the mapping itself is verified
    for every size of the context, ``proof``)."""

    program: Program
    target: GpuTarget
    kernels: tuple[KernelMapping, ...]
    costs: tuple[KernelCost, ...]
    solver: tuple[SolveReport, ...]  # SCIP's report per kernel
    cost_sizes: tuple[tuple[str, int], ...]
    proof: VerificationReport | None = None  # what verify proved of these very decisions
    context: str | None = None  # the constraints on the symbolic sizes it was proved for
    given: bool = False  # the decisions were given to compile, not solved (``solver``: given_reports)
    band_choices: tuple[BandChoice, ...] = ()  # deep bands whose hardware axes SCIP's costs chose
    splits: tuple[SplitChoice, ...] = ()  # reduction loops considered for a split, in the order chosen
    scans: tuple[ScanChoice, ...] = ()  # select scans weighed for exact passes, in textual order
    # notes on the program as written (``ir.zero_starts``: a max= that reads an out buffer's zeros)
    notes: tuple[str, ...] = ()
    # whether a float scatter's atomics (an order of rounding that varies) were refused
    deterministic: bool = True
    fusion: FusionSummary | None = None  # what ``fuse`` chose (None: no fuse asked)

    def __repr__(self) -> str:
        """One line (``str`` is the whole report)."""
        n = len(self.kernels)
        state = "proved" if self.proved else "not proved"
        how = "given" if self.given else "solved"
        return (
            f"<Mapping of {self.program.name} for {self.target.name}: {n} kernel{'' if n == 1 else 's'}, "
            f"{how}, predicted {self.predicted_time_s * 1e6:.4g} us, {state}>"
        )

    @property
    def proofs(self) -> tuple[str, ...]:
        """What verify proved, one line per obligation (none without a proof)."""
        return self.proof.lines() if self.proof is not None else ()

    @property
    def proved(self) -> bool:
        """Whether ``proof`` is the proof of this mapping: its program, its decisions, its
        context (a mapping edited after it was proved is not)."""
        return self.proof is not None and self.proof.proves(self.program, self.kernels, self.context)

    @property
    def predicted_time_s(self) -> float:
        return sum(c.time_s * c.launches for c in self.costs)

    def kernel(self, name: str) -> KernelMapping:
        for k in self.kernels:
            if k.kernel.name == name:
                return k
        raise KeyError(name)

    def report(self, *, proofs: bool = False) -> str:
        """The report ``str`` gives; ``proofs=True`` lists every obligation isl proved
        instead of counting them in one line."""
        from polymap.mapping.report import format_mapping

        return format_mapping(self, proofs=proofs)

    def to_json(self) -> dict:
        """The report as JSON-ready data (``polymap map --json``; ``mapping/export.py``)."""
        from polymap.mapping.export import mapping_data

        return mapping_data(self)

    def __str__(self) -> str:
        return self.report()
