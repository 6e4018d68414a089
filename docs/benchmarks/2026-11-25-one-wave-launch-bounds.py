"""The record's figures: counts of the machine code NVRTC makes for sm_90 (no GPU), for every
kernel of models/ as emitted, and the same source with the launch bounds' minimum of one
block per SM taken out (the code before the change). Run from the repository root:
python docs/benchmarks/2026-11-25-one-wave-launch-bounds.py"""

import re
from pathlib import Path

import polymap
from polymap.machine_code.sass import parse_resources
from polymap.poly.affinity import analyze_binding_defaults
from polymap.runtime import cuobjdump
from polymap.runtime.nvrtc import compile_cubin


def resources(source: str):
    return parse_resources(cuobjdump.resource_usage(compile_cubin(source, name="k.cu", arch="sm_90")))


print(
    "| model | kernel | blocks | threads | registers / stack, no minimum | as emitted | hot loop: FMA share, FMA per LDS |"
)
print("|---|---|---:|---:|---|---|---|")
for path in sorted(Path("models").glob("*.te")):
    program, _, _ = analyze_binding_defaults(polymap.load(path))  # flat indices: sizes bound
    kernel = polymap.compile(program)
    before = resources(re.sub(r"__launch_bounds__\((\d+), 1\)", r"__launch_bounds__(\1)", kernel.source))
    for k in kernel.machine_code().kernels:
        old, now = before[k.function], k.resources
        hot = (
            "-"
            if k.hot is None
            else f"{k.hot.fma_share:.1%}, "
            + (f"{k.hot.fma_per_shared_load:.2f}" if k.hot.fma_per_shared_load is not None else "no LDS")
        )
        mark = " (one wave)" if k.one_wave else ""
        print(
            f"| {path.stem} | {k.function.removeprefix(path.stem + '_')}{mark} | {k.grid_blocks} | "
            f"{k.threads_per_block} | {old.registers} / {old.stack} | {now.registers} / {now.stack} | {hot} |"
        )
