"""SCIP over every model of models/ (optimize at the default sizes, deterministic=False):
per model the kernels' summed SCIP nodes and solving time and their objectives, and the
wall time of polymap.compile on gpt3_attention_tiny (3 runs). Prints one JSON line. Run
from a checkout's root with that checkout first on sys.path; record 2026-11-28-staged-hint.md."""

import json
import time
from pathlib import Path

import polymap
import polymap.mapping.solve as solve_module

seen = []
real = solve_module.solve


def spy(model, *, time_limit_s=None):
    report = real(model, time_limit_s=time_limit_s)
    seen.append((report.status, model.getNTotalNodes(), report.solve_time_s, report.objective))
    return report


solve_module.solve = spy
out = {"models": {}}
for path in sorted(Path("models").glob("*.te")):
    seen.clear()
    polymap.optimize(polymap.load(path).bind_defaults(), deterministic=False)
    out["models"][path.stem] = {
        "statuses": sorted({s for s, *_ in seen}),
        "nodes": sum(n for _, n, _, _ in seen),
        "scip_s": sum(t for _, _, t, _ in seen),
        "objectives": [o for *_, o in seen],
    }
solve_module.solve = real
walls = []
for _ in range(3):
    tiny = polymap.load("models/gpt3_attention_tiny.te")
    start = time.perf_counter()
    polymap.compile(tiny)
    walls.append(time.perf_counter() - start)
out["compile_tiny_s"] = walls
print(json.dumps(out))
