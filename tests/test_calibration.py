"""The cost model against a public SGEMM ladder (docs/calibration.md): each step of the
ladder written as a pinned mapping of one 4096^3 matmul. The model must rank the steps in
the order they were measured; the steps the model predicts within 30% of their measured
ratio to the best expressible step are held to it here, and the page says why the others
are not."""

from __future__ import annotations

import pytest

from polymap import optimize, parse

SGEMM = """
param M = 4096
param N = 4096
param K = 4096
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""

UNSTAGED = {"stage": []}
# the staged steps in one slot per tile: the kernels timed on 2026-11-24 copied each tile
# after computing the one before (double buffering came later)
# (step, % of cuBLAS measured on an H100 at 4096^3, the step as pins)
LADDER = (
    (
        "naive",
        1,
        {
            "i": {"thread": "x", "threads": 32, "seq": 1},
            "j": {"thread": "y", "threads": 32, "seq": 1},
            "k": UNSTAGED,
        },
    ),
    (
        "coalesced",
        12,
        {
            "j": {"thread": "x", "threads": 32, "seq": 1},
            "i": {"thread": "y", "threads": 32, "seq": 1},
            "k": UNSTAGED,
        },
    ),
    (
        "shared-memory tiles",
        18,
        {
            "j": {"thread": "x", "threads": 32, "seq": 1},
            "i": {"thread": "y", "threads": 32, "seq": 1},
            "k": {"tile": 32, "stage": ["A", "B"], "transpose": [], "copy": 1, "slots": 1},
        },
    ),
    (
        "1-D register tiles",
        34,
        {
            "j": {"thread": "x", "threads": 64, "seq": 1},
            "i": {"thread": "y", "threads": 8, "seq": 8, "distribution": "blocked", "interleave": True},
            "k": {"tile": 8, "stage": ["A", "B"], "transpose": [], "copy": 1, "slots": 1},
        },
    ),
    (
        "2-D register tiles",
        51,
        {
            "j": {"thread": "x", "threads": 32, "seq": 4, "distribution": "cyclic"},
            "i": {"thread": "y", "threads": 8, "seq": 16, "distribution": "blocked", "interleave": True},
            "k": {"tile": 8, "stage": ["A", "B"], "transpose": [], "copy": 1, "slots": 1},
        },
    ),
    (
        "float4 copies",
        62,
        {
            "j": {"thread": "x", "threads": 32, "seq": 4, "distribution": "blocked"},
            "i": {"thread": "y", "threads": 8, "seq": 16, "distribution": "blocked", "interleave": True},
            "k": {"tile": 8, "stage": ["A", "B"], "transpose": ["A"], "slots": 1},
        },
    ),
)
HELD = ("2-D register tiles", "float4 copies")  # within 30% today (docs/calibration.md)

# polymap's own kernels for the same steps, timed on an H100 80GB HBM3 on 2026-11-24 with
# kernel.time (docs/benchmarks/2026-11-24-h100.md, run 4): microseconds per 4096^3 product
H100_US = {
    "naive": 275936.3,
    "coalesced": 24481.6,
    "shared-memory tiles": 24038.5,
    "1-D register tiles": 11984.5,
    "2-D register tiles": 7062.7,
    "float4 copies": 4558.1,
}
# within 30% of polymap's own ratios on the H100; step 5 was (0.838 against 0.645) until the
# tile-loads roof, which brought steps 3, 4 and 6 closer and step 5 to 0.866 (docs/calibration.md)
HELD_H100 = ("shared-memory tiles", "1-D register tiles")


@pytest.fixture(scope="module")
def predicted() -> dict[str, float]:
    program = parse(SGEMM, name="sgemm")
    return {step: optimize(program, pins=pins).costs[0].time_s for step, _, pins in LADDER}


def test_the_model_ranks_the_ladder_in_the_measured_order(predicted):
    """The public ladder's order, which is also the order of polymap's own steps on the H100
    (H100_US decreases along LADDER)."""
    times = [predicted[step] for step, _, _ in LADDER]
    assert times == sorted(times, reverse=True)
    assert len(set(times)) == len(times)


def test_the_top_steps_ratio_to_the_best_is_within_30_percent(predicted):
    best_measured = max(percent for _, percent, _ in LADDER)
    best_predicted = min(predicted.values())
    for step, percent, _ in LADDER:
        if step in HELD:
            measured, model = percent / best_measured, best_predicted / predicted[step]
            assert model == pytest.approx(measured, rel=0.3), step


def test_the_middle_steps_ratio_to_the_best_is_within_30_percent_of_the_h100(predicted):
    best_measured, best_predicted = H100_US["float4 copies"], predicted["float4 copies"]
    for step in HELD_H100:
        measured, model = best_measured / H100_US[step], best_predicted / predicted[step]
        assert model == pytest.approx(measured, rel=0.3), step


# --------------------------------------------------------------------------- first loads
# Pinned mappings of the 4096^2 transpose and the 2^26 axpy, timed on an H100 on 2026-11-24
# (docs/benchmarks/2026-11-24-h100.md, run 6): a thread with more points has more loads in
# flight. Microseconds; a device-to-device copy of the same bytes took 46.5 and 266.7.
TRANSPOSE_H100_US = {1: 84.0, 2: 58.2, 4: 48.3, 8: 48.0}  # points of j per thread (8 rows of threads)
AXPY_H100_US = {1: 291.6, 2: 261.1, 4: 264.3}  # points per thread, 256 threads, cyclic


def _predicted(model: str, pins: dict) -> float:
    from pathlib import Path

    from polymap.ir.parse import load

    program = load(Path(__file__).resolve().parent.parent / "models" / model)
    return optimize(program, pins=pins).predicted_time_s * 1e6


def test_the_first_load_roof_separates_what_the_h100_separated():
    """One point per thread is predicted slower than four, as measured, and within 30% of
    the measured time at both ends; SCIP's own choice takes several points."""
    row = {"threads": 32, "seq": 1}  # i on x as in every measured variant (block (32, 8, 1))
    one = _predicted("transpose.te", {"i": row, "j": {"threads": 8, "seq": 1, "distribution": "cyclic"}})
    four = _predicted("transpose.te", {"i": row, "j": {"threads": 8, "seq": 4, "distribution": "cyclic"}})
    assert one == pytest.approx(TRANSPOSE_H100_US[1], rel=0.3)
    assert four == pytest.approx(TRANSPOSE_H100_US[4], rel=0.3)
    assert one > 1.5 * four
    a1 = _predicted("axpy.te", {"i": {"threads": 256, "seq": 1, "distribution": "cyclic"}})
    a2 = _predicted("axpy.te", {"i": {"threads": 256, "seq": 2, "distribution": "cyclic"}})
    assert a1 == pytest.approx(AXPY_H100_US[1], rel=0.3) and a2 == pytest.approx(AXPY_H100_US[2], rel=0.3)
    assert a1 > a2
    from pathlib import Path

    from polymap.ir.parse import load

    models = Path(__file__).resolve().parent.parent / "models"
    for name in ("transpose.te", "axpy.te"):
        chosen = optimize(load(models / name)).kernels[0]
        assert chosen.points >= 2, name
