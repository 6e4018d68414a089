"""The record's figures: per kernel of models/ (at the sizes each model declares), the
mapping SCIP chose, its predicted time and shared memory, and the counts of the machine code
NVRTC makes for sm_90 (no GPU): ptxas's registers against the model's, stack, occupancy, and
the hot loop's FMA share and FMAs per shared load. Run from outside the checkout, with the
checkout first on the path (it imports the polymap it finds there; the models are read from
the checkout given as the first argument):

    PYTHONPATH=<checkout> python docs/benchmarks/2026-11-28-grid-share.py <checkout> > out.json
"""

import json
import sys
from pathlib import Path

import polymap
from polymap.poly.affinity import analyze_binding_defaults

root = Path(sys.argv[1])
rows = []
for path in sorted((root / "models").glob("*.te")):
    program, _, _ = analyze_binding_defaults(polymap.load(path))  # flat indices: sizes bound
    kernel = polymap.compile(program)
    mapping = kernel.mapping
    code = {k.function: k for k in kernel.machine_code().kernels}
    for mapped, cost, solve in zip(mapping.kernels, mapping.costs, mapping.solver):
        function = f"{path.stem}_{mapped.kernel.name}"
        k = code[function]
        hot = k.hot
        rows.append(
            {
                "kernel": function,
                "loops": [[m.index, m.threads, m.seq] for m in mapped.loops],
                "threads_per_block": mapped.threads_per_block,
                "staging": None if mapped.staging is None else str(mapped.staging),
                "predicted_us": round(cost.time_s * 1e6, 3),
                "bound_by": cost.bound_by,
                "shared_bytes_model": cost.shared_bytes,
                "scip": [solve.status, round(solve.solve_time_s, 2)],
                "registers_ptxas": k.resources.registers,
                "registers_model": k.model_registers,
                "stack_bytes": k.resources.stack,
                "occupancy_blocks_per_sm": k.occupancy.blocks_per_sm,
                "occupancy_limiter": k.occupancy.limiter,
                "hot_fma_share": None if hot is None else round(hot.fma_share, 4),
                "hot_fma_per_shared_load": None
                if hot is None or hot.fma_per_shared_load is None
                else round(hot.fma_per_shared_load, 2),
            }
        )
        print(function, rows[-1]["predicted_us"], rows[-1]["hot_fma_share"], file=sys.stderr, flush=True)
json.dump(rows, sys.stdout, indent=1)
