"""``polymap bench --plan``: the planner on seed 000's evaluation and the Orojenesis 2-GEMM.

Seed 000 planned the GPT-3 attention chain (Q_proj -> QK -> QKV) at four sizes, tiny
(32, 128) to large (1024, 4096), each at capacities of 4096, 8192 and 16384 floats; its
full-tree constraint program solved the Orojenesis 2-GEMM (32k x 4k x 16k then
32k x 16k x 4k) in 0.76 s. Each case here is planned twice in one run: free, and with every
intermediate pinned to DRAM (the unfused plan), so the record shows what fusion saves.
"""

from __future__ import annotations

import datetime
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polymap.ir.parse import load
from polymap.plan.planner import Plan, plan

ATTENTION_SIZES = (("tiny", 32, 128), ("small", 64, 256), ("med", 128, 512), ("large", 1024, 4096))
ATTENTION_CAPACITIES = (4096, 8192, 16384)


@dataclass(frozen=True, slots=True)
class PlanCase:
    name: str
    model: str
    sizes: tuple[tuple[str, int], ...]
    capacity: int


@dataclass(frozen=True, slots=True)
class PlanRun:
    case: PlanCase
    fused: Plan
    unfused: Plan
    wall_s: float  # the free plan's call, reading the program included


def cases(root: Path) -> tuple[PlanCase, ...]:
    found = [
        PlanCase(f"attention {size}", "gpt3_attention.te", (("SEQ", seq), ("DIM", dim)), capacity)
        for size, seq, dim in ATTENTION_SIZES
        for capacity in ATTENTION_CAPACITIES
    ]
    found.append(PlanCase("Orojenesis 2-GEMM", "orojenesis_ffn.te", (), 512 * 1024))
    return tuple(found)


def run(root: Path, *, time_limit_s: float | None, say: Callable[[str], None]) -> list[PlanRun]:
    runs = []
    for case in cases(root):
        program = load(root / "models" / case.model).bind(**dict(case.sizes))
        start = time.perf_counter()
        fused = plan(program, case.capacity, time_limit_s=time_limit_s)
        wall = time.perf_counter() - start
        dram = {link.buffer: "dram" for link in fused.chain.links if link is not None}
        unfused = plan(program, case.capacity, links=dram, time_limit_s=time_limit_s)
        runs.append(PlanRun(case, fused, unfused, wall))
        say(
            f"{case.name} at {case.capacity}: {fused.report.status} in {fused.report.solve_time_s:.2f} s, "
            f"{fused.bytes} bytes (unfused {unfused.bytes})"
        )
    return runs


def markdown(runs: list[PlanRun], *, command: str, machine: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Fusion planner, {now}",
        "",
        f"Command: `{command}`. Machine: {machine}, Python {platform.python_version()}.",
        "",
        "Each case is planned twice in the same run: free (SCIP chooses every link's mode) and unfused "
        "(every intermediate pinned to DRAM). `bytes` is the exact off-chip traffic of the plan SCIP "
        "returned (in bytes, 4 per float); `SCIP` columns are SCIP's own status, solve time, and the dual "
        "bound in the same unit. The free plan's SCIP time is both of its solves: the best plan without "
        "tiled links, solved first and given to the whole search as its first solution, then that search. "
        "`wall` is the whole `polymap.plan` call of the free plan (reading the "
        "chain, building and solving the model, accounting). Capacities are in elements (floats).",
        "",
        "| case | sizes | capacity | links (free plan) | SCIP status | SCIP time (s) | of it, first solution (s) | "
        "wall (s) | bytes | dual bound | gap | unfused bytes | unfused SCIP time (s) | unfused / free |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        f, u = r.fused, r.unfused
        links = ", ".join(f"{b} {m.value}" for b, m in f.link_modes().items())
        sizes = ", ".join(f"{n}={v}" for n, v in f.sizes)
        bound = f.report.dual_bound * f.objective_unit_bytes
        lines.append(
            f"| {r.case.name} | {sizes} | {r.case.capacity} | {links} | {f.report.status} | "
            f"{f.report.solve_time_s:.2f} | {f.first_solution_s:.2f} | {r.wall_s:.2f} | {f.bytes} | {bound:.6g} | {f.report.gap:.2g} | "
            f"{u.bytes} | {u.report.solve_time_s:.2f} | {u.bytes / f.bytes:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)
