"""The cost model's predictions before and after buffers that stay in L2 (``mapping/caching.py``):
issue 12's bandwidth cases, each against a device-to-device copy of the same bytes at the
target's DRAM bandwidth, and every model of models/ at its cost sizes. Predictions, not
timings. Prints one JSON object. Run from /work/main's parent or anywhere, with the checkout
to measure first on sys.path (PYTHONPATH) and MODELS naming the models folder:

    PYTHONPATH=<checkout> python docs/benchmarks/2026-11-28-cached-buffers.py <models folder>
"""

import json
import sys
from pathlib import Path

import polymap
from polymap.targets import H100

MODELS = Path(sys.argv[1])
COLUMN_SUM = "param M, N\nin X: f32[M, N]\nout c: f32[N]\npar N j { seq M i { c[j] += X[i, j] } }\n"
FULL_SUM = "param N\nin X: f32[N]\nout s: f32[1]\nseq N i { s[0] += X[i] }\n"
CASES = {  # name: (program text, sizes, bytes a copy moves: what the program must read or write once)
    "softmax_rows 16384 x 4096": (
        (MODELS / "softmax_rows.te").read_text(),
        {"M": 16384, "N": 4096},
        2 * 16384 * 4096 * 4,
    ),
    "gemv 16384 x 16384": ((MODELS / "gemv.te").read_text(), {"M": 16384, "N": 16384}, 16384 * 16384 * 4),
    "full sum 2^26": (FULL_SUM, {"N": 2**26}, 2**26 * 4),
    "column sum 8192 x 8192": (COLUMN_SUM, {"M": 8192, "N": 8192}, 8192 * 8192 * 4),
}


def describe(mapping) -> list:
    return [
        {
            "kernel": cost.kernel,
            "predicted_us": round(cost.time_s * 1e6, 3),
            "bound_by": cost.bound_by,
            "memory_us": round(cost.memory_s * 1e6, 3),
            "cached": [buffer for buffer, _ in getattr(cost, "cached", ())],
        }
        for cost in mapping.costs
    ]


out = {"cases": {}, "models": {}}
for name, (text, sizes, copy_bytes) in CASES.items():
    mapping = polymap.optimize(polymap.parse(text).bind(**sizes))
    copy_s = copy_bytes / H100.dram_bandwidth
    out["cases"][name] = {
        "predicted_us": round(mapping.predicted_time_s * 1e6, 2),
        "copy_us": round(copy_s * 1e6, 2),
        "share_of_copy": round(copy_s / mapping.predicted_time_s, 3),
        "kernels": describe(mapping),
    }
for path in sorted(MODELS.glob("*.te")):
    program = polymap.load(str(path))
    try:
        mapping = polymap.optimize(program)
    except polymap.NotAffineError:  # transpose_flat's N * N: at its sizes as written
        mapping = polymap.optimize(program.bind_defaults())
    out["models"][path.stem] = {
        "predicted_us": round(mapping.predicted_time_s * 1e6, 3),
        "kernels": describe(mapping),
    }
    print(path.name, file=sys.stderr)
print(json.dumps(out, indent=1))
