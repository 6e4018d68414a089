"""The register estimate against ptxas, for every kernel of models/ (no GPU needed).

    python 2026-11-29-register-estimate.py measure OUT.json [FLOOR]  # with the checkout first on sys.path
    python 2026-11-29-register-estimate.py fit BEFORE.json    # the grid search of the constants

``measure`` compiles each model as ``polymap inspect`` does (NVRTC, sm_90) and writes, per
kernel, ptxas's registers and stack, the model's estimate, and what the estimate is built
from: the estimate less FLOOR (default 32, the constant floor before this change: what is
left is the accumulators' and fragments' part, which the change keeps; meaningful for the
checkout before it only), the global buffers the kernel reads or writes, whether it has
lanes, and its staged tiles. ``fit`` searches the constants of
``polymap/mapping/cost_model.py``'s ``REGISTERS_*`` on such a file (the one measured before
the change) for the most kernels within 15% of ptxas, and reports the same count left one
kernel out at a time (each kernel judged by constants fitted without it)."""

import itertools
import json
import sys
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "models"


def measure(out: str, floor: int) -> None:
    import polymap
    import polymap.mapping.solve as solve
    from polymap.machine_code.report import inspect_kernel

    seen = {}
    estimate = solve.KernelProblem.registers

    def recorded(problem, mapping):
        total = estimate(problem, mapping)
        staging = mapping.staging
        seen[problem.kernel.name] = {
            "per_point": total - floor,
            "buffers": len({a.buffer for a in problem.accesses}),
            "lanes": mapping.lanes > 1,
            "staged": len(staging.buffers) if staging else 0,
        }
        return total

    solve.KernelProblem.registers = recorded
    rows = {}
    for path in sorted(MODELS.glob("*.te")):
        program = polymap.load(str(path))
        try:
            kernel = polymap.compile(program)
        except polymap.NotAffineError:  # sizes only the model's defaults bind
            kernel = polymap.compile(program.bind_defaults())
        features, _ = dict(seen), seen.clear()
        for k in inspect_kernel(kernel).kernels:
            name = "kernel" + k.function.rsplit("_kernel", 1)[1]
            rows[k.function] = {
                "ptxas": k.resources.registers,
                "stack": k.resources.stack,
                "model": k.model_registers,
                **features.get(name, {}),
            }
    Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    within = sum(abs(r["ptxas"] / r["model"] - 1) <= 0.15 for r in rows.values())
    print(f"{within} of {len(rows)} kernels within 15% of ptxas")
    for name, r in rows.items():
        print(f"{name:40s} ptxas {r['ptxas']:4d} model {r['model']:4d} ratio {r['ptxas'] / r['model']:.2f}")


def fit(path: str) -> None:
    rows = list(json.loads(Path(path).read_text()).values())

    def estimate(r, thread, per_buffer, lanes, per_staged):
        return (
            r["per_point"]
            + thread
            + per_buffer * r["buffers"]
            + lanes * r["lanes"]
            + per_staged * r["staged"]
        )

    grid = list(itertools.product(range(24), range(6), range(24), range(16)))

    def hits(rs, c):
        return sum(abs(r["ptxas"] / max(1, estimate(r, *c)) - 1) <= 0.15 for r in rs)

    def best(rs):  # the most hits; among ties the first in the grid's order
        return max(grid, key=lambda c: hits(rs, c))

    c = best(rows)
    print(
        f"constants (thread, per buffer, lanes, per staged tile) {c}: {hits(rows, c)} of {len(rows)} within 15%"
    )
    left_out = sum(hits([r], best(rows[:k] + rows[k + 1 :])) for k, r in enumerate(rows))
    print(f"left one out: {left_out} of {len(rows)} within 15%")


if __name__ == "__main__":
    if sys.argv[1] == "measure":
        measure(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 32)
    else:
        fit(sys.argv[2])
