"""compile(gpt3_attention_tiny) side by side for two or more checkouts, interleaved: each of 8
rounds runs, per checkout, a fresh process that compiles once (imports and caches warm) and
times a second compile. Usage: python THIS name=/path/to/checkout name2=/path/to/other.
Prints one JSON line; record 2026-11-28-bigger-block-hint.md."""

import json
import statistics
import subprocess
import sys

code = "import time, polymap; p = polymap.load('models/gpt3_attention_tiny.te'); polymap.compile(p); t = time.perf_counter(); polymap.compile(polymap.load('models/gpt3_attention_tiny.te')); print(time.perf_counter() - t)"
trees = dict(a.split("=") for a in sys.argv[1:])
walls = {k: [] for k in trees}
for _ in range(8):
    for name, tree in trees.items():
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tree,
            env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        )
        walls[name].append(float(out.stdout.strip()))
print(
    json.dumps(
        {
            k: {"walls_s": [round(w, 3) for w in v], "median_s": round(statistics.median(v), 3)}
            for k, v in walls.items()
        }
    )
)
