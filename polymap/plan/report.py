"""The text of a plan: the loop tree, each tensor's traffic and tile, SCIP's account."""

from __future__ import annotations

from polymap.plan.planner import Plan
from polymap.plan.tree import LinkMode, Loop


def format_plan(plan: Plan) -> str:
    chain = plan.chain
    sizes = ", ".join(f"{n}={v}" for n, v in plan.sizes)
    lines = [f"plan of {chain.program}" + (f" ({sizes})" if sizes else "") + f", capacity {plan.capacity}"]
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
    moved = cost.reads + cost.writes
    verb = "written" if cost.writes else "read"
    return f"tile {cost.tile}, {moved} elements {verb}"


def _solver_line(plan: Plan) -> str:
    report = plan.report
    unit = plan.objective_unit_bytes
    if report.objective is None:
        return f"SCIP: {report.status}"
    gap = "inf" if report.gap == float("inf") else f"{report.gap:.2%}"
    return (
        f"SCIP: {report.status} in {report.solve_time_s:.2f} s, objective {report.objective * unit:.6g} bytes, "
        f"dual bound {report.dual_bound * unit:.6g} bytes, gap {gap}"
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
