"""The record's figures: predictions of the cost model and counts of the machine code (no
GPU). Run from the repository root: python docs/benchmarks/2026-11-25-scatters-and-atomics.py"""

import polymap
from polymap.ir.parse import load, parse

FULL_SUM = "param N = 4194304\nin x: {t}[N]\nout s: {t}[1]\nseq N i {{ s[0] += x[i] }}"

for dtype, deterministic in (("i32", True), ("f32", True), ("f32", False)):
    mapping = polymap.optimize(parse(FULL_SUM.format(t=dtype), name="full_sum"), deterministic=deterministic)
    print(f"## full sum of 2^22 {dtype}, deterministic={deterministic}")
    for choice in mapping.splits:
        print(choice.describe().splitlines()[0])
    print(f"kernels: {len(mapping.kernels)}; predicted time: {mapping.predicted_time_s * 1e6:.4g} us in all")
    print()

histogram = load("models/histogram.te")
mapping = polymap.optimize(histogram)
print("## models/histogram.te")
print(
    "\n".join(line for line in str(mapping).splitlines() if "atomic updates" in line or "predicted" in line)
)
print(polymap.compile(histogram, mapping).machine_code())
