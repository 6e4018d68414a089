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

# two chains of our own, found by a review: a chain of three small GEMMs, and two
# element-wise einsums, where the fused program is predicted faster
THREE_GEMMS = """
param M = 32
param D = 16
in  X:  f32[M, D]
in  A: f32[D, D]
in  B: f32[D, D]
in  C: f32[D, D]
new H1: f32[M, D]
new H2: f32[M, D]
out Y:  f32[M, D]
H1[m, d] = 0
H1[m, d] += X[m, e] * A[e, d]
H2[m, d] = 0
H2[m, d] += H1[m, e] * B[e, d]
Y[m, d] += H2[m, e] * C[e, d]
"""
ELEMENTWISE = """
param M = 256, N = 128
in  A: f32[M, N]
in  B: f32[M, N]
new T: f32[M, N]
out C: f32[M, N]
T[i, j] = A[i, j] * B[i, j]
C[i, j] = T[i, j] + A[i, j]
"""

root = Path(sys.argv[1])
tiny = polymap.load(root / "models" / "gpt3_attention_tiny.te")
ffn = polymap.load(root / "models" / "orojenesis_ffn.te")  # the 2-GEMM chain, at smaller sizes
CASES = [
    ("gpt3_attention_tiny", tiny, "1K", None),
    ("gpt3_attention_tiny", tiny, "2K", {"Q": "tiled", "S": "dram"}),
    ("orojenesis_ffn M=64 D=32 F=64", ffn.bind(M=64, D=32, F=64), "4K", None),
    ("orojenesis_ffn M=1024 D=256 F=1024", ffn.bind(M=1024, D=256, F=1024), "16K", {"H": "tiled"}),
    ("three GEMMs 32x16x16", polymap.parse(THREE_GEMMS, name="three_gemm"), "1K", None),
    ("element-wise pair 256x128", polymap.parse(ELEMENTWISE, name="eltwise"), "128", None),
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
