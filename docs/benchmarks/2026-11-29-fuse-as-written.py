"""The record's figures: per chain of models/ and capacity, what ``polymap.optimize(program,
fuse=capacity)`` maps (the program's name, its kernels; with ``fuse_if`` where the checkout
has it) and the cost model's predicted time of one run (the sum over its kernels, at the
sizes the model declares), beside the program mapped as written. Predicted times, not GPU timings. Run from outside the checkout, with
the checkout first on the path (it imports the polymap it finds there; the models are read
from the checkout given as the first argument):

    PYTHONPATH=<checkout> python docs/benchmarks/2026-11-29-fuse-as-written.py <checkout> > out.json
"""

import json
import sys
import time
from pathlib import Path

import polymap
import polymap.fused

MODELS = ("fc_bias_relu", "gpt3_attention_tiny", "gpt3_attention", "orojenesis_ffn")
CAPACITIES = (None, "1K", "2K", "4K", "8K", "16K", "48KiB")  # None: as written; 48KiB is fuse=True on an H100

# a checkout with ``fuse_if`` maps each capacity twice: the fused program where it is
# predicted faster (the default) and the fused program always; an older one as it does
POLICIES = FUSE_IF if (FUSE_IF := getattr(polymap.fused, "FUSE_IF", None)) else (None,)

root = Path(sys.argv[1])
rows = []
for name in MODELS:
    program = polymap.load(root / "models" / f"{name}.te")
    for capacity in CAPACITIES:
        for policy in POLICIES if capacity is not None else (None,):
            start = time.perf_counter()
            options = {} if policy is None else {"fuse_if": policy}
            mapping = polymap.optimize(program, fuse=capacity, **options)
            rows.append(
                {
                    "model": name,
                    "fuse": capacity,
                    "fuse_if": policy,
                    "mapped": mapping.program.name,
                    "kernels": len(mapping.kernels),
                    "predicted_us": round(sum(c.time_s for c in mapping.costs) * 1e6, 3),
                    "seconds": round(time.perf_counter() - start, 2),
                }
            )
            print(rows[-1], file=sys.stderr, flush=True)
json.dump(rows, sys.stdout, indent=1)
