"""The report a performance engineer reads: the mapped loop nest, the cost table, SCIP's line."""

from __future__ import annotations

import math
from collections import Counter

from polymap.ir.atomics import atomic_lines
from polymap.ir.nodes import Loop
from polymap.ir.printer import format_block
from polymap.mapping.outcome import Outcome, SolveReport
from polymap.mapping.proof import Obligation
from polymap.mapping.result import RANKING_WEIGHT, KernelCost, Mapping
from polymap.mapping.space import WARP_LANES, KernelMapping


def solver_line(report: SolveReport, cost: KernelCost | None = None) -> str:
    """SCIP's status, time, objective and dual bound as SCIP reported them; with the kernel's
    ``cost``, how the objective splits into the predicted time and the ranking term."""
    if report.outcome is Outcome.NO_DECISIONS:
        return "no decisions to solve (serial kernel: one block of one thread)"
    if report.outcome is Outcome.GIVEN:
        return "given, not solved: a mapping from the caller, its costs recomputed by the model"
    obj = "-" if report.objective is None else f"{report.objective:.6g} us"
    if report.objective is not None and cost is not None:
        model_us = cost.objective_s * 1e6
        split = (
            f"predicted {cost.time_s * 1e6:.6g} us + {cost.ranking_s * 1e6:.4g} us: "
            f"{RANKING_WEIGHT:.0%} of the memory and shared-memory times, which ranks mappings under the same roof"
        )
        if math.isclose(report.objective, model_us, rel_tol=1e-4, abs_tol=1e-6):
            obj += f" ({split})" if cost.ranking_s > 0 else ""
        else:  # an incumbent whose bound variables are not tight, or SCIP's tolerances
            obj += f" (SCIP's value of its incumbent; the model's cost of these decisions is {model_us:.6g} us, {split})"
    bound = f"{report.dual_bound:.6g} us"
    if report.gap is None:
        gap = "-"
    elif math.isinf(report.gap):
        gap = "unknown (no dual bound yet)"
    else:
        gap = f"{100 * report.gap:.2f}%"
    line = (
        f"SCIP {report.status} in {report.solve_time_s:.3f} s: objective {obj}, dual bound {bound}, gap {gap}"
    )
    if report.outcome is Outcome.TIME_LIMIT:
        line += " (stopped at the time limit: the best mapping found, not proved optimal)"
    return line


def format_mapping(mapping: Mapping, *, proofs: bool = False) -> str:
    """The report: per kernel the mapped loop nest, the cost table and SCIP's line; then the
    total and what isl proved, in one line (``proofs``: one line per obligation)."""
    sizes = ", ".join(f"{n} = {v}" for n, v in mapping.program.bindings + mapping.cost_sizes) or "no sizes"
    if mapping.fusion is not None and mapping.fusion.fused and mapping.fusion.sizes:
        planned = ", ".join(f"{n} = {v}" for n, v in mapping.fusion.sizes)
        sizes = f"{planned} (the plan's sizes, numbers in the fused program)"
    lines = [
        f"mapping of program {mapping.program.name} for {mapping.target.name}",
        f"  cost estimated at {sizes}",
    ]
    if mapping.fusion is not None:
        lines.append(f"  {mapping.fusion.note}")
    for kernel, cost, report in zip(mapping.kernels, mapping.costs, mapping.solver):
        lines.append("")
        lines.extend(format_kernel(kernel))
        lines.extend(format_cost(cost))
        lines.append("  " + solver_line(report, cost))
    lines.append("")
    lines.extend(choice.describe() for choice in mapping.band_choices)
    lines.extend(choice.describe() for choice in mapping.scans)
    lines.extend(choice.describe() for choice in mapping.splits)
    lines.extend(atomic_lines(mapping.program))
    lines.extend(mapping.notes)
    lines.append(f"predicted time: {mapping.predicted_time_s * 1e6:.4g} us in all")
    lines.append("  " + proof_summary(mapping, listed=proofs))
    if proofs and mapping.proved:
        lines.extend(f"  proved: {proof}" for proof in mapping.proofs)
    if any(k.loops for k in mapping.kernels):
        lines.append(key_line(mapping.target.sector_bytes))
    return "\n".join(lines)


def key_line(sector_bytes: int) -> str:
    """The words of the report in one line, and where they are explained at length."""
    return (
        f"key: T threads of a block and S points of a thread on the loop; lane stride: elements between "
        f"neighbouring lanes' addresses; sectors/req: the {sector_bytes}-byte sectors one warp request "
        "touches; GPU filled: the share of the GPU's thread slots the launch keeps busy "
        "(docs/mapping.md, 'Reading the report')"
    )


def proof_summary(mapping: Mapping, *, listed: bool = False) -> str:
    """What isl proved of this mapping, counted by kind of obligation, in one line; ``listed``:
    the obligations follow, one per line (only for a proof of this very mapping)."""
    if mapping.proof is None:
        return "not proved: no proof is attached to this mapping"
    if not mapping.proved:
        return "not proved: the proof attached is of other decisions (the mapping was edited after it)"
    report = mapping.proof
    proved = [p for k in report.kernels for p in k.proved] + list(report.launch_order)
    counts = Counter(p.obligation for p in proved)
    kinds = ", ".join(f"{o.value} {counts[o]}" for o in Obligation if counts[o])
    return (
        f"proved by isl for {report.sizes}: {len(proved)} obligation{'s' if len(proved) != 1 else ''}"
        + (f" ({kinds})" if kinds else "")
        + (":" if listed else "; --proofs lists them")
    )


def format_kernel(mapped: KernelMapping) -> list[str]:
    kernel = mapped.kernel
    lines = []
    host = " ".join(f"seq {h.extent} {h.index} {{" for h in kernel.host_loops)
    if host:
        lines.append(
            f"{host}  (host loop{'s' if len(kernel.host_loops) > 1 else ''}, a launch per iteration)"
        )
    if not mapped.loops:
        lines.append(f"{kernel.name}: serial, grid (1, 1, 1) x block (1, 1, 1)")
        lines.extend("    " + line for line in format_block(kernel.body, 0))
        return lines
    grid, block = mapped.grid_dim(), mapped.block_dim()
    lines.append(
        f"{kernel.name}: grid {grid} x block {block} = {mapped.threads_per_block} threads per block, "
        f"{mapped.blocks} block{'s' if mapped.blocks != 1 else ''}"
    )
    depth = 1
    for loop in mapped.loops:
        blocks = f"{loop.blocks} block{'s' if loop.blocks != 1 else ''}"
        detail = f"T={loop.threads}, S={loop.seq}, {loop.describe_distribution()}, {blocks}; guard {loop.index} < {loop.extent}"
        if loop.seq > 1:
            lines.append("  " * depth + f"for s_{loop.index} in 0..{loop.seq - 1}:")
            depth += 1
        lines.append("  " * depth + f"{loop.index_formula()}    # {detail}")
    lines.extend("  " * depth + line for line in format_block(kernel.body, 0))
    lines.extend(_par_loops_in_the_thread(kernel.body))
    if mapped.interleaved and mapped.points > 1:
        lines.append(
            f"  points interleaved: each step of the body runs all {mapped.points} points of the thread "
            "(outer-product order; a value that several points read in a step is read once)"
        )
    if mapped.staging is not None:
        lines.extend(format_staging(mapped))
    lines.extend(format_lanes(mapped))
    return lines


def format_lanes(mapped: KernelMapping) -> list[str]:
    """A kernel's lanes (``lanes.py``): which loops a warp runs together, and what a join
    combines (and whether that reorders a float sum)."""
    if mapped.lanes <= 1:
        return []
    lanes = mapped.lanes
    per_point = (
        "a warp per point" if lanes <= WARP_LANES else f"{lanes // WARP_LANES} warps per point, a block each"
    )
    lines = [
        f"  {per_point}: threadIdx.x is the lane; lane 0 runs the body, and the {lanes} lanes "
        f"run each loop below together (its iteration n on lane n % {lanes})"
    ]
    how = "by shuffles" if lanes <= WARP_LANES else "by shuffles, then the warps' through shared memory"
    for sp in mapped.spread:
        combined = ", ".join(sp.reduction_text(name, op) for name, op in sp.accumulators)
        what = f"partial {combined} combined {how} at its end" if combined else "no reduction"
        order = (
            "; reorders a float += or *= (reassociate=False or --no-reassociate keeps the program's order)"
            if sp.reassociates
            else ""
        )
        shares = f"; shares {', '.join(sp.shared)}" if sp.shared else ""
        lines.append(f"    loop {mapped.spread_place(sp)}: {what}{shares}{order}")
    if mapped.shared_locals:
        lines.append(
            f"    {', '.join(mapped.shared_locals)}: one copy per point in shared memory, read and written by "
            "every lane (a fork's or join's barrier between two lanes' accesses)"
        )
    return lines


def _par_loops_in_the_thread(body) -> list[str]:
    """A note on the par loops of the band that run inside each thread (the loops beyond the
    three mapped ones): why they have no hardware axis."""
    inside = []
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].is_par:
        inside.append(body[0])
        body = body[0].body
    if not inside:
        return []
    names = ", ".join(f"'{loop.index}'" for loop in inside)
    return [
        f"  note: par loop{'s' if len(inside) > 1 else ''} {names} run{'' if len(inside) > 1 else 's'} "
        "inside each thread: a kernel gives hardware axes to three par loops of a band; a deeper "
        "band is folded into three only where the inner loops' extents are numbers (bind the "
        "sizes, e.g. --size, to fold it); else, where its extents allow, the three are those of "
        "the cheapest mapping SCIP found over every choice (the band's line below)"
    ]


def format_staging(mapped: KernelMapping) -> list[str]:
    """How a staged kernel runs its tiles (``mapping/staging.py``), in words."""
    staging = mapped.staging
    together = mapped.interleaved and mapped.points > 1
    each = "each for all of the thread's points" if together else "for each of the thread's points"
    if staging.loop is None:
        order = "each block copies its tile, meets at __syncthreads(), then runs the body"
    elif staging.double_buffered:
        order = (
            f"loop {staging.loop} runs in tiles of {staging.tile}, two in shared memory at once: each step "
            f"starts the copy of the next tile (cp.async), runs this tile's iterations {each}, waits for "
            "its copies and meets at __syncthreads(); a step before the first copies the first tile"
        )
    else:
        order = (
            f"loop {staging.loop} runs in tiles of {staging.tile}: per tile the block copies the tiles, "
            f"meets at __syncthreads(), runs the tile's iterations {each}, and "
            f"meets again before the next tile's copy"
        )
    return [f"  shared memory: {staging.describe()}", f"    {order}"]


def format_cost(cost: KernelCost) -> list[str]:
    headers = ("access", "stmt", "lane stride", "sectors/req", "requests", "bytes")
    rows = [
        (
            f"{'write' if a.is_write else 'read'} {a.access}"
            + (" (shared)" if a.from_shared else "")
            + (" (L2)" if a.cached and not a.from_shared else ""),
            a.statement,
            str(a.lane_stride),
            str(a.sectors_per_request),
            str(a.requests),
            str(a.bytes),
        )
        for a in cost.accesses
    ]
    lines = _table(headers, rows, left=2)
    whole = [(buffer, size) for buffer, size in cost.cached if buffer not in cost.windowed]
    if whole:
        held = ", ".join(f"{buffer} ({size} bytes)" for buffer, size in whole)
        lines.append(
            f"  in L2: {held}; DRAM moves {'it' if len(whole) == 1 else 'each'} once, and the (L2) "
            "reads' bytes are the caches' (docs/mapping.md, 'Buffers that stay in L2')"
        )
    windows = [(buffer, size) for buffer, size in cost.cached if buffer in cost.windowed]
    if windows:
        held = ", ".join(f"{buffer} ({size} bytes)" for buffer, size in windows)
        lines.append(
            f"  held in L2 for neighbouring band points or accesses: {held}; DRAM moves "
            f"{'it' if len(windows) == 1 else 'each'} once, and the (L2) reads' bytes are the caches' "
            "(docs/mapping.md, 'Buffers that stay in L2')"
        )
    if cost.reused:
        merged = any(label.startswith("write") for label in cost.reused)
        lines.append(
            f"  touched before by their band point: {', '.join(cost.reused)}; the caches serve "
            + ("them, and a write merges with the one before" if merged else "them")
            + " (docs/mapping.md, 'What a band point touched before')"
        )
    lines.append(
        f"  {cost.flops} flops; {cost.roofs_text()}, "
        + f"GPU filled {100 * cost.fill:.3g}% -> predicted {cost.time_s * 1e6:.4g} us ({cost.bound_by} bound)"
        + (f"; {cost.shared_bytes} bytes of shared memory per block" if cost.shared_bytes else "")
        + (f"; about {cost.registers} registers per thread" if cost.registers else "")
        + (f" per launch x {cost.launches} launches" if cost.launches != 1 else "")
    )
    return lines


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]], *, left: int) -> list[str]:
    """Columns as wide as their widest cell: the first ``left`` aligned left, numbers right."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]

    def line(cells) -> str:
        return (
            "  "
            + " ".join(
                cell.ljust(w) if k < left else cell.rjust(w) for k, (cell, w) in enumerate(zip(cells, widths))
            ).rstrip()
        )

    return [line(headers)] + [line(row) for row in rows]
