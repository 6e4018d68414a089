"""SCIP over every model of models/ with its NLP relaxation (Ipopt, CppAD) on and off, RINS
off in both (as polymap ran it from 2026-11-27), one setting after the other, in
alternating rounds so that the host's load falls on both alike. (2026-11-27's script with
these two settings.)

Per model and setting: SCIP's status, nodes, solving time and objective for each kernel
(summed over the kernels), and the wall time of ``polymap.compile`` on gpt3_attention_tiny.
Run from the repository root: ``python docs/benchmarks/2026-11-29-scip-nlp-off.py [ROUNDS]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import polymap
import polymap.mapping.farkas as farkas
import polymap.mapping.solve as solve_module

MODELS = sorted(Path("models").glob("*.te"))
BASE = {"heuristics/shiftandpropagate/freq": -1}
SETTINGS = {  # the NLP on (as polymap ran it before) and off, RINS off in both
    "nlp off, rins off": {"nlp/disable": True, "heuristics/rins/freq": -1},
    "nlp on, rins off": {"nlp/disable": False, "heuristics/rins/freq": -1},
}
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def use(params: dict) -> None:
    farkas.UNSAFE_SCIP_PARAMS = {**BASE, **params}


def solves(program) -> list[tuple[str, int, float, float | None]]:
    seen = []
    real = solve_module.solve

    def spy(model, *, time_limit_s=None):
        report = real(model, time_limit_s=time_limit_s)
        seen.append((report.status, model.getNNodes(), report.solve_time_s, report.objective))
        return report

    solve_module.solve = spy
    try:
        polymap.optimize(program, deterministic=False)
    finally:
        solve_module.solve = real
    return seen


def main() -> None:
    rows: dict[tuple[str, str], list] = {}
    compile_s: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(ROUNDS):
        for name, params in SETTINGS.items():
            use(params)
            for path in MODELS:
                program = polymap.load(path).bind_defaults()
                rows.setdefault((path.stem, name), []).append(solves(program))
            tiny = polymap.load("models/gpt3_attention_tiny.te")
            start = time.perf_counter()
            polymap.compile(tiny)
            compile_s[name].append(time.perf_counter() - start)
    print(
        "| model | setting | kernels | statuses | nodes (median of rounds) | SCIP s (median) | objective us |"
    )
    print("|---|---|---:|---|---:|---:|---:|")
    totals = dict.fromkeys(SETTINGS, 0.0)
    for path in MODELS:
        for name in SETTINGS:
            runs = rows[(path.stem, name)]
            statuses = sorted({s for run in runs for s, *_ in run})
            nodes = statistics.median(sum(n for _, n, _, _ in run) for run in runs)
            seconds = statistics.median(sum(t for _, _, t, _ in run) for run in runs)
            objective = sum(o or 0.0 for _, _, _, o in runs[0])
            totals[name] += seconds
            print(
                f"| {path.stem} | {name} | {len(runs[0])} | {', '.join(statuses)} | {nodes:.0f} "
                f"| {seconds:.2f} | {objective:.4f} |"
            )
    for name in SETTINGS:
        print(f"\n{name}: SCIP's solving time over the models {totals[name]:.2f} s (sum of medians)")
        print(
            f"{name}: compile(gpt3_attention_tiny) wall s: median {statistics.median(compile_s[name]):.2f}, "
            f"runs {[round(t, 2) for t in compile_s[name]]}"
        )


if __name__ == "__main__":
    main()
