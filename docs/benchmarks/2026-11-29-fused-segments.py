"""The record's second table: fused segments as ``--fuse`` maps them. Per case (a chain, a
capacity, links pinned where SCIP's plan would not fuse), the plan's segments and band,
and the cost model's predicted time of ``program_to_map`` (the fused segments rewritten,
every other nest as written), next to the program as written. Predicted times, not GPU
timings. Run from outside the checkout, with the checkout first on the path (the models
are read from the checkout given as the first argument):

    PYTHONPATH=<checkout> python docs/benchmarks/2026-11-29-fused-segments.py <checkout>
"""

import sys
from pathlib import Path

import polymap
from polymap.plan.planner import plan
from polymap.plan.program import program_to_map

root = Path(sys.argv[1])
tiny = polymap.load(root / "models" / "gpt3_attention_tiny.te")
ffn = polymap.load(root / "models" / "orojenesis_ffn.te")  # the 2-GEMM chain, at smaller sizes
CASES = [
    ("gpt3_attention_tiny", tiny, "1K", None),
    ("gpt3_attention_tiny", tiny, "2K", {"Q": "tiled", "S": "dram"}),
    ("orojenesis_ffn M=64 D=32 F=64", ffn.bind(M=64, D=32, F=64), "4K", None),
    ("orojenesis_ffn M=1024 D=256 F=1024", ffn.bind(M=1024, D=256, F=1024), "16K", {"H": "tiled"}),
]
print(
    "| chain | capacity | links | segments | bands | fused program us (kernels) | as written us (kernels) |"
)
print("|---|---|---|---|---|---:|---:|")
for name, program, capacity, links in CASES:
    result = plan(program, capacity, links=links)
    bands = [[(b.dim, b.factor) for b in result.nests[g[0]].band] for g in result.segments if len(g) > 1]
    cells = []
    for mapped in (program_to_map(program, result), program.bind_defaults()):
        mapping = polymap.optimize(mapped)
        cells.append(f"{sum(c.time_s for c in mapping.costs) * 1e6:.4g} ({len(mapping.kernels)})")
    print(
        f"| {name} | {capacity} | {links or 'free'} | {result.segments} | {bands} | {cells[0]} | {cells[1]} |",
        flush=True,
    )
