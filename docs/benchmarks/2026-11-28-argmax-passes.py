"""Predictions (not timings) for issue 12's GPU-filled figure over every kernel of models/,
and for the select scan rewritten as exact passes (polymap/transform/scans.py).

    python docs/benchmarks/2026-11-28-argmax-passes.py OUT.json

Per kernel of each model at its default sizes (H100 target): the share of the GPU's thread
slots the launch fills, the predicted time and its roof, and the most threads the kernel's
band could use (its points at the cost sizes; lanes multiply them by the spread loops'
lanes) against the GPU's slots. Per select scan: SCIP's objective as written and as passes.
Run it with the checkout first on sys.path (PYTHONPATH=<checkout>), from outside the
checkout. Wall times are of a shared 2-core host.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import polymap
from polymap.errors import PolymapError
from polymap.ir.nodes import IConst
from polymap.mapping.space import kernels

ROOT = Path(polymap.__file__).resolve().parents[1]


def band_points(mapping, number: int) -> int | None:
    """The points of kernel ``number``'s band at the cost sizes (None where an extent is no number)."""
    bound = mapping.program.bind(**dict(mapping.cost_sizes))
    band = kernels(bound)[number].band
    extents = [loop.extent for loop in band]
    if not all(isinstance(e, IConst) for e in extents):
        return None
    return math.prod(max(0, e.value) for e in extents)


def main(out: str) -> None:
    rows, scans = [], []
    for path in sorted((ROOT / "models").glob("*.te")):
        start = time.perf_counter()
        try:
            mapping = polymap.optimize(polymap.load(path))
        except PolymapError as err:
            rows.append({"model": path.stem, "error": str(err).splitlines()[0]})
            continue
        wall = time.perf_counter() - start
        slots = mapping.target.sm_count * mapping.target.max_threads_per_sm
        for number, (km, cost) in enumerate(zip(mapping.kernels, mapping.costs)):
            rows.append(
                {
                    "model": path.stem,
                    "kernel": km.kernel.name,
                    "fill": cost.fill,
                    "threads": cost.threads,
                    "lanes": km.lanes,
                    "band_points": band_points(mapping, number),
                    "gpu_slots": slots,
                    "predicted_us": cost.time_s * 1e6,
                    "bound_by": cost.bound_by,
                    "optimize_wall_s": wall,
                }
            )
        for choice in mapping.scans:
            scans.append(
                {
                    "model": path.stem,
                    "loop": choice.loop,
                    "options": [
                        {"form": w, "objective_us": o * 1e6 if o else None} for w, o, _ in choice.options
                    ],
                    "passes": choice.rewritten,
                }
            )
    Path(out).write_text(json.dumps({"kernels": rows, "scans": scans}, indent=1) + "\n")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:22s} {r['error'][:90]}")
            continue
        print(
            f"{r['model']:22s} {r['kernel']:26s} filled {100 * r['fill']:6.2f}%  threads {r['threads']:>9d}"
            f"  band points {r['band_points']!s:>9s}  {r['predicted_us']:10.4g} us  {r['bound_by']}"
        )
    for s in scans:
        print(s)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "argmax-passes.json")
