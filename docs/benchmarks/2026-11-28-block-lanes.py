"""Every model of models/ at its default sizes: per kernel the lanes SCIP chose, the GPU
filled, the predicted time and SCIP's status and time (the cost model's prediction for the
H100 target; no GPU). Run from the repository root; record 2026-11-28-block-lanes.md."""

from pathlib import Path

import polymap

for path in sorted(Path("models").glob("*.te")):
    program = polymap.load(path).bind_defaults()
    mapping = polymap.optimize(program, deterministic=False)
    for km, cost, report in zip(mapping.kernels, mapping.costs, mapping.solver):
        print(
            f"| {path.stem} | {km.kernel.name} | {km.lanes} | {cost.fill:.1%} | {cost.time_s * 1e6:.4g} "
            f"| {report.status} {report.solve_time_s:.2f} s |",
            flush=True,
        )
