"""The cost model's predictions for issue 12's bandwidth cases, each against a device-to-device
copy of the same bytes at the target's DRAM bandwidth (predictions, not timings). Prints one
JSON line. Run from a checkout's root with that checkout first on sys.path; record
2026-11-28-scattered-splits.md."""

import json

import polymap
from polymap.targets import H100

COLUMN_SUM = "param M, N\nin X: f32[M, N]\nout c: f32[N]\npar N j { seq M i { c[j] += X[i, j] } }\n"
FULL_SUM = "param N\nin X: f32[N]\nout s: f32[1]\nseq N i { s[0] += X[i] }\n"
CASES = {  # name: (program text, sizes, bytes a copy moves: what the program must read or write once)
    "softmax_rows 16384 x 4096": (
        open("models/softmax_rows.te").read(),
        {"M": 16384, "N": 4096},
        2 * 16384 * 4096 * 4,
    ),
    "gemv 16384 x 16384": (open("models/gemv.te").read(), {"M": 16384, "N": 16384}, 16384 * 16384 * 4),
    "full sum 2^26": (FULL_SUM, {"N": 2**26}, 2**26 * 4),
    "column sum 8192 x 8192": (COLUMN_SUM, {"M": 8192, "N": 8192}, 8192 * 8192 * 4),
    "column sum 16384 x 4096": (COLUMN_SUM, {"M": 16384, "N": 4096}, 16384 * 4096 * 4),
    "argmax_rows 4096 x 1024": (
        open("models/argmax_rows.te").read(),
        {"M": 4096, "N": 1024},
        4096 * 1024 * 4,
    ),
}
out = {}
for name, (text, sizes, copy_bytes) in CASES.items():
    mapping = polymap.optimize(polymap.parse(text).bind(**sizes))
    copy_s = copy_bytes / H100.dram_bandwidth
    out[name] = {
        "predicted_us": round(mapping.predicted_time_s * 1e6, 2),
        "copy_us": round(copy_s * 1e6, 2),
        "share_of_copy": round(copy_s / mapping.predicted_time_s, 3),
        "kernels": len(mapping.kernels),
        "lanes": [k.lanes for k in mapping.kernels],
        "splits": [c.describe().splitlines()[0] for c in mapping.splits if c.split is not None],
    }
print(json.dumps(out))
