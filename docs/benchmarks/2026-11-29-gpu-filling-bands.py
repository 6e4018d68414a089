"""The chains of ``models/`` planned with and without a floor of 132 band tiles (an H100's
SMs: one block each) on a segment fused a tile at a time: the links SCIP chooses and the
off-chip bytes. Markdown on stdout:

    python docs/benchmarks/2026-11-29-gpu-filling-bands.py

It imports the polymap it finds first on ``sys.path``."""

from __future__ import annotations

import math
from pathlib import Path

import polymap
from polymap.plan.planner import plan

MODELS = Path(__file__).resolve().parents[2] / "models"
CHAINS = ("gpt3_attention_tiny", "gpt3_attention", "orojenesis_ffn", "fc_bias_relu")
CAPACITIES = ("1K", "4K", "16K", "48KiB")
FLOOR = 132


def describe(result) -> str:
    links = ", ".join(f"{b} {m.value}" for b, m in result.link_modes().items()) or "none"
    bands = [
        "x".join(str(loop.factor) for loop in result.nests[group[0]].band) or "1"
        for group in result.segments
        if len(group) > 1
    ]
    tiles = [
        math.prod(loop.factor for loop in result.nests[g[0]].band) for g in result.segments if len(g) > 1
    ]
    return f"{links} | {', '.join(f'{b} ({t})' for b, t in zip(bands, tiles)) or '-'} | {result.bytes}"


def main() -> None:
    print(
        f"| chain | capacity | links (free) | fused bands (tiles) | bytes | links (>= {FLOOR} tiles) "
        "| fused bands (tiles) | bytes | SCIP s (free / floor) |"
    )
    print("|---|---|---|---|---:|---|---|---:|---|")
    for name in CHAINS:
        program = polymap.load(MODELS / f"{name}.te")
        for capacity in CAPACITIES:
            free = plan(program, capacity)
            floor = plan(program, capacity, min_band_tiles=FLOOR)
            times = f"{free.report.solve_time_s:.2f} / {floor.report.solve_time_s:.2f}"
            print(f"| {name} | {capacity} | {describe(free)} | {describe(floor)} | {times} |")


if __name__ == "__main__":
    main()
