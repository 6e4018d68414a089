"""Registers, stack and occupancy of every kernel of ``models/`` (machine code for sm_90:
NVRTC's cubin read with cuobjdump; counts of the code, not timings), as ``polymap.compile``
emits it at the models' symbolic sizes, as JSON on stdout; where a kernel's blocks at an
edge run in a function of their own (``codegen.cuda.EdgeFunction``), that function's
registers and stack too. Run it once per checkout, with that checkout first on ``sys.path``:

    PYTHONPATH=<checkout> python docs/benchmarks/2026-11-29-edge-functions.py > <checkout>.json

transpose_flat, whose buffer is declared ``f32[N * N]``, is bound to N = 1024 (it is not
quasi-affine with N free)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polymap
from polymap.machine_code.report import inspect_kernel

MODELS = Path(__file__).resolve().parents[2] / "models"
BOUND = {"transpose_flat": {"N": 1024}}


def main() -> None:
    rows = {}
    for path in sorted(MODELS.glob("*.te")):
        program = polymap.load(path)
        if path.stem in BOUND:
            program = program.bind(**BOUND[path.stem])
        report = inspect_kernel(polymap.compile(program))
        for k in report.kernels:
            edge = getattr(k, "edge_resources", None)  # None before the edge functions
            rows[k.function] = {
                "threads": k.threads_per_block,
                "registers": k.resources.registers,
                "stack": k.resources.stack,
                "model_registers": k.model_registers,
                "warps_per_sm": k.occupancy.warps_per_sm,
                "edge_registers": edge.registers if edge is not None else None,
                "edge_stack": edge.stack if edge is not None else None,
            }
    json.dump({"polymap": str(Path(polymap.__file__).parent.parent), "kernels": rows}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
