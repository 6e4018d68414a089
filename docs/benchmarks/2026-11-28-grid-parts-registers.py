"""Registers and stack per thread of every kernel of models/ (sm_90, NVRTC, read with
cuobjdump), for the checkout first on sys.path. Prints one JSON object:
{function: [registers, stack bytes]}. Counts of the code, not timings.

    PYTHONPATH=<checkout> python docs/benchmarks/2026-11-28-grid-parts-registers.py > out.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polymap
from polymap.machine_code.report import inspect_kernel


def main() -> None:
    models = sorted(Path(__file__).resolve().parents[2].glob("models/*.te"))
    counts = {}
    for path in models:
        program = polymap.load(str(path))
        try:
            kernel = polymap.compile(program)
        except polymap.NotAffineError:  # transpose_flat's N * N: at its sizes as written
            kernel = polymap.compile(program.bind_defaults())
        report = inspect_kernel(kernel)
        for k in report.kernels:
            counts[k.function] = [k.resources.registers, k.resources.stack]
        print(path.name, file=sys.stderr)
    json.dump(counts, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
