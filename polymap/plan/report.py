"""A plan as text and as JSON: the loop tree, each tensor's traffic and tile, SCIP's account.

The JSON (``polymap plan --json``, :meth:`Plan.to_json`) has the content of the text, every
number as computed: traffic in elements and bytes, tiles and footprints in the capacity's
unit, SCIP's objective and dual bound converted to bytes (``null`` where SCIP has none).
"""

from __future__ import annotations

from typing import Any

from polymap.mapping.export import finite_or_none
from polymap.plan.planner import Plan
from polymap.plan.tree import LinkMode, Loop

FORMAT_VERSION = 1  # bumped when a field changes meaning or is removed


def plan_data(plan: Plan) -> dict[str, Any]:
    """``plan`` as JSON-ready dicts, lists, strings and numbers."""
    report, unit = plan.report, plan.objective_unit_bytes
    costs = {(c.einsum, c.tensor): c for c in plan.accounting.tensors}

    def item(e: int, entry) -> dict[str, Any]:
        if isinstance(entry, Loop):
            return {"loop": entry.dim, "factor": entry.factor}
        return {"level": plan.chain.einsums[e].tensors[entry.tensor].text}

    return {
        "format": FORMAT_VERSION,
        "program": plan.chain.program,
        "sizes": dict(plan.sizes),
        "capacity": {"amount": plan.capacity.amount, "unit": plan.capacity.unit},
        "min_band_tiles": plan.min_band_tiles,
        "scip": {
            "status": report.status,
            "outcome": report.outcome.value,
            "solve_time_s": report.solve_time_s,  # the first solution's solve included
            "first_solution_s": plan.first_solution_s,
            "objective_bytes": None if report.objective is None else report.objective * unit,
            "dual_bound_bytes": finite_or_none(report.dual_bound * unit),
            "gap": finite_or_none(report.gap),
        },
        "intermediates": {buffer: mode.value for buffer, mode in plan.link_modes().items()},
        "segments": [
            {
                "einsums": [plan.chain.einsums[e].name for e in group],
                "band": [{"loop": loop.dim, "factor": loop.factor} for loop in plan.nests[group[0]].band],
            }
            for group in plan.segments
        ],
        "einsums": [
            {
                "name": einsum.name,
                "statement": einsum.text,
                "statements": list(einsum.statements),
                "band": [{"loop": loop.dim, "factor": loop.factor} for loop in nest.band],
                "nest": [item(e, entry) for entry in nest.items],
                "held": [einsum.tensors[t].text for t in nest.held],
                "footprint": footprint,
                "tensors": [
                    {
                        "access": use.text,
                        "output": use.is_output,
                        "where": costs[e, t].where,
                        "tile": costs[e, t].tile,
                        "reads": costs[e, t].reads,
                        "writes": costs[e, t].writes,
                        "bytes": costs[e, t].bytes,
                    }
                    for t, use in enumerate(einsum.tensors)
                ],
            }
            for e, (einsum, nest, footprint) in enumerate(
                zip(plan.chain.einsums, plan.nests, plan.accounting.footprints, strict=True)
            )
        ],
        "bytes": plan.bytes,
    }


def format_plan(plan: Plan) -> str:
    chain = plan.chain
    sizes = ", ".join(f"{n}={v}" for n, v in plan.sizes)
    lines = [f"plan of {chain.program}" + (f" ({sizes})" if sizes else "") + f", capacity {plan.capacity}"]
    if plan.min_band_tiles > 1:
        lines[0] += f", a segment fused a tile at a time in at least {plan.min_band_tiles} band tiles"
    lines.append(_solver_line(plan))
    links = plan.link_modes()
    if links:
        lines.append("intermediates: " + ", ".join(f"{b} {_mode_words(m)}" for b, m in links.items()))
    costs = {(c.einsum, c.tensor): c for c in plan.accounting.tensors}
    for group in plan.segments:
        band = plan.nests[group[0]].band
        names = ", ".join(chain.einsums[e].label for e in group)
        if band:
            loops = ", ".join(f"{loop.dim} x{loop.factor}" for loop in band)
            lines.append(f"segment {names}: fused band {loops} (every einsum below runs per band tile)")
        elif len(group) > 1:
            lines.append(f"segment {names}: fused, band of one tile (each intermediate whole, once)")
        else:
            lines.append(f"segment {names}")
        for e in group:
            einsum, nest = chain.einsums[e], plan.nests[e]
            depth = 2 if band else 1
            lines.append("  " * depth + f"{einsum.name}: {einsum.text}")
            for t in nest.held:
                c = costs[e, t]
                lines.append(
                    "  " * (depth + 1) + f"held {c.label}: {c.tile} elements, loaded once per segment"
                )
            for item in nest.items:
                if isinstance(item, Loop):
                    lines.append("  " * (depth + 1) + f"for {item.dim} x{item.factor}")
                    depth += 1
                else:
                    c = costs[e, item.tensor]
                    lines.append("  " * (depth + 1) + f"level {c.label}: {_level_words(c)}")
    lines.append("")
    lines.append(_traffic_table(plan))
    lines.append("")
    footprints = ", ".join(
        f"{einsum.name} {f}" for einsum, f in zip(chain.einsums, plan.accounting.footprints, strict=True)
    )
    lines.append(
        f"on chip while each einsum runs ({plan.capacity.unit}, capacity {plan.capacity.amount}): {footprints}"
    )
    return "\n".join(lines)


def _mode_words(mode: LinkMode) -> str:
    return {
        LinkMode.DRAM: "written back (dram)",
        LinkMode.TILED: "kept on chip one band tile at a time (tiled fusion)",
        LinkMode.WHOLE: "kept whole on chip (untiled fusion)",
    }[mode]


def _level_words(cost) -> str:
    if cost.where == "tiled":
        return f"tile {cost.tile}, on chip (fused intermediate)"
    moved = [f"{cost.reads} elements read"] if cost.reads else []
    moved += [f"{cost.writes} elements written"] if cost.writes else []
    return f"tile {cost.tile}, " + (", ".join(moved) or "nothing moved")


def _solver_line(plan: Plan) -> str:
    report = plan.report
    unit = plan.objective_unit_bytes
    if report.objective is None:
        return f"SCIP: {report.status}"
    gap = "inf" if report.gap == float("inf") else f"{report.gap:.2%}"
    first = (
        f" ({plan.first_solution_s:.2f} s of it for a first solution: the best plan without tiled links)"
        if plan.first_solution_s
        else ""
    )
    return (
        f"SCIP: {report.status} in {report.solve_time_s:.2f} s{first}, objective "
        f"{report.objective * unit:.6g} bytes, dual bound {report.dual_bound * unit:.6g} bytes, gap {gap}"
    )


def _traffic_table(plan: Plan) -> str:
    rows = [("einsum", "tensor", "where", "tile", "reads", "writes", "bytes")]
    for c in plan.accounting.tensors:
        rows.append(
            (
                plan.chain.einsums[c.einsum].name,
                c.label,
                c.where,
                str(c.tile),
                str(c.reads),
                str(c.writes),
                str(c.bytes),
            )
        )
    rows.append(("total", "", "", "", "", "", str(plan.bytes)))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if k < 3 else cell.rjust(w)
            for k, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )
