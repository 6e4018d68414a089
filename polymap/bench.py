"""``polymap bench``: measured numbers, written with their raw data under docs/benchmarks/.

Today it measures the optimizer itself: for every model, the wall time of ``optimize``
(analysis, Farkas linearization, SCIP, certificate checks and the isl proof) and SCIP's own
status, solve time, objective, dual bound and gap for each kernel. GPU kernel timings join
this when code generation lands.
"""

from __future__ import annotations

import datetime
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from polymap.ir.parse import load
from polymap.mapping.export import finite_or_none
from polymap.mapping.report import solver_line
from polymap.mapping.result import Mapping
from polymap.mapping.solve import optimize
from polymap.poly.affinity import analyze_binding_defaults
from polymap.targets import get_target


@dataclass(frozen=True, slots=True)
class SolverRun:
    model: str
    sizes: str
    wall_s: float
    kernels: tuple[
        tuple[str, str, float, float | None, float, float | None], ...
    ]  # name, status, time, obj, bound, gap
    mapping: Mapping | None = None  # the last run's mapping (its costs: the roofline of --plot)


def bench_solver(
    models: list[Path],
    *,
    target: str = "h100",
    repeats: int = 3,
    time_limit: float | None = None,
    echo: bool = True,
) -> list[SolverRun]:
    """Optimize every model ``repeats`` times; keep the median wall time and the last report.
    ``time_limit`` is SCIP's limit per kernel solve (``optimize``'s default when None); with
    ``echo`` each model's line is printed as it finishes (stderr otherwise)."""
    runs = []
    for path in models:
        program, _, _ = analyze_binding_defaults(load(path))  # flat buffers need their sizes
        walls, mapping = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            mapping = optimize(program, target, time_limit=time_limit)
            walls.append(time.perf_counter() - start)
        walls.sort()
        sizes = ", ".join(f"{n}={v}" for n, v in program.bindings + mapping.cost_sizes)
        kernels = tuple(
            (k.kernel.name, r.status or r.outcome.value, r.solve_time_s, r.objective, r.dual_bound, r.gap)
            for k, r in zip(mapping.kernels, mapping.solver)
        )
        runs.append(SolverRun(path.stem, sizes, walls[len(walls) // 2], kernels, mapping))
        print(
            f"{path.stem}: {walls[len(walls) // 2]:.3f} s; "
            + "; ".join(solver_line(r) for r in mapping.solver),
            file=sys.stdout if echo else sys.stderr,
            flush=True,
        )
    return runs


def machine() -> str:
    """The CPU model and core count, for the record."""
    import os

    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {model}, {os.cpu_count()} cores"


def solver_json(runs: list[SolverRun], *, target: str, command: str) -> dict:
    """The runs as JSON-ready data: what ``solver_markdown`` records, a bound or gap SCIP
    does not have as ``null``."""

    return {
        "format": 1,
        "command": command,
        "target": get_target(target).name,
        "host": machine(),
        "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": [
            {
                "model": run.model,
                "sizes": run.sizes,
                "median_wall_s": run.wall_s,
                "kernels": [
                    {
                        "kernel": name,
                        "status": status,
                        "solve_time_s": solve_s,
                        "objective_us": finite_or_none(objective),
                        "dual_bound_us": finite_or_none(bound),
                        "gap": finite_or_none(gap),
                    }
                    for name, status, solve_s, objective, bound, gap in run.kernels
                ],
            }
            for run in runs
        ],
    }


def solver_markdown(runs: list[SolverRun], *, target: str, command: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Optimizer speed, {now}",
        "",
        f"Command: `{command}`. Machine: {machine()}, Python {platform.python_version()}. Target: {target}.",
        "",
        "`wall` is the median of the runs of `optimize` (isl analysis, Farkas linearization, SCIP, exact "
        "certificate checks and the isl proof of the mapping); the kernel columns are SCIP's own report.",
        "",
        "| model | sizes | wall (s) | kernel | SCIP status | SCIP time (s) | objective (us) | dual bound (us) | gap |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        for k, (name, status, solve_s, objective, bound, gap) in enumerate(run.kernels):
            first = k == 0
            obj = "-" if objective is None else f"{objective:.6g}"
            gap_text = "-" if gap is None else f"{100 * gap:.2f}%"
            lines.append(
                f"| {run.model if first else ''} | {run.sizes if first else ''} | "
                f"{f'{run.wall_s:.3f}' if first else ''} | {name} | {status} | {solve_s:.3f} | {obj} | "
                f"{bound:.6g} | {gap_text} |"
            )
    return "\n".join(lines) + "\n"
