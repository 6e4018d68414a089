"""``polymap bench --kernels``: generated kernels against their baselines, in one run.

Telamon's set (seed 001) plus a transpose, each next to the baseline that bounds it, timed
in the same process with CUDA events (median of repeated runs, every sample kept):

* axpy 2^26 against a device-to-device copy of the same bytes (read x, y; write z);
* matmul 256x256x32, 1024^3 and 4096^3 (fp32) against ``cupy.matmul`` (cuBLAS SGEMM);
* the stride-32 matmul against a naive one-thread-per-element kernel and against
  ``cupy.matmul`` on the unstrided problem;
* the transpose against a copy of the same bytes.

Each row also shows the optimizer's predicted time. Without a GPU the same cases run their
correctness part on the host (the emitted source through the host compiler, at reduced
sizes, compared with the reference executor), and the record says the GPU figures are
pending: no number is made up. Either way the record carries the machine code of each
case's full-size kernel for the target (``polymap.machine_code``: registers, local memory,
occupancy, the hot loop's instruction mix), so a change of the code generator shows its
effect without a GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polymap.errors import PolymapError
from polymap.ir.parse import load
from polymap.kernel import Kernel
from polymap.kernel import compile as compile_program
from polymap.poly.affinity import analyze_binding_defaults
from polymap.reference import reference
from polymap.runtime.arguments import random_inputs

NAIVE_STRIDED = r"""
extern "C" __global__ void naive_strided(const float* A, const float* B, float* C, int M, int N, int K) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (i < M && j < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[i * 32 * K + 32 * k] * B[k * N + j];
    C[i * N + j] = acc;
  }
}
"""


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    model: str  # file under models/
    sizes: dict[str, int]  # bound at run time (the kernel stays symbolic where it can)
    host_sizes: dict[str, int]  # reduced sizes for the host correctness run
    baselines: tuple[str, ...]
    bytes_moved: Callable[[dict[str, int]], int] = field(default=lambda s: 0)


CASES = (
    Case("axpy 2^26", "axpy.te", {}, {"N": 1000}, ("copy",), lambda s: 3 * 4 * s["N"]),
    Case("matmul 256x256x32", "matmul_256x256x32.te", {}, {"M": 40, "N": 33, "K": 7}, ("cublas",)),
    Case("matmul 1024^3", "matmul_1024.te", {}, {"M": 33, "N": 65, "K": 9}, ("cublas",)),
    Case(
        "matmul 4096^3",
        "matmul_1024.te",
        {"M": 4096, "N": 4096, "K": 4096},
        {"M": 17, "N": 70, "K": 5},
        ("cublas",),
    ),
    Case("matmul stride-32 A", "matmul_strided_a.te", {}, {"M": 9, "N": 40, "K": 6}, ("naive", "cublas")),
    Case(
        "transpose 4096^2",
        "transpose.te",
        {},
        {"M": 33, "N": 47},
        ("copy",),
        lambda s: 2 * 4 * s["M"] * s["N"],
    ),
)


@dataclass(frozen=True, slots=True)
class Result:
    case: str
    sizes: dict[str, int]
    where: str  # "gpu" or "host"
    max_error: float
    predicted_s: float
    samples_s: tuple[float, ...] = ()  # polymap's kernel, one per repetition (GPU only)
    baselines: dict[str, tuple[float, ...]] = field(default_factory=dict)  # baseline -> samples
    machine_code: tuple = ()  # KernelMachineCode per launch of the full-size kernel
    machine_code_error: str = ""  # why there is none (cuobjdump or NVRTC missing)

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.samples_s) if self.samples_s else None


def _sizes(program, given: dict[str, int]) -> dict[str, int]:
    defaults = {p.name: p.default for p in program.params if p.default is not None}
    return {**defaults, **given}


def _inputs(program, sizes: dict[str, int], xp=np, seed: int = 0) -> dict:
    return {name: xp.asarray(a) for name, a in random_inputs(program, sizes, seed).items()}


def _compile(case: Case, root: Path) -> tuple[object, Kernel]:
    program = load(root / "models" / case.model)
    program, _, _ = analyze_binding_defaults(program)  # flat buffers need their sizes bound
    if case.sizes:
        program = program.bind(**{k: v for k, v in case.sizes.items() if k in program.param_names})
    return program, compile_program(program)


def _machine_code(kernel: Kernel) -> dict:
    """The ``Result`` fields of ``kernel``'s machine code, or the reason it could not be read."""
    try:
        return {"machine_code": kernel.machine_code().kernels}
    except PolymapError as err:
        return {"machine_code_error": err.message}


def _max_error(got: dict, want: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64) - want[k]), initial=0.0)) for k in want)


def run_host_cases(root: Path, cases=CASES) -> list[Result]:
    """The correctness part, on the host, at each case's reduced sizes."""
    results = []
    for case in cases:
        program = load(root / "models" / case.model)
        bound_defaults, _, _ = analyze_binding_defaults(program)
        if bound_defaults is not program:  # flat indices: bind the small sizes instead
            program = program.bind(**{k: v for k, v in case.host_sizes.items() if k in program.param_names})
        kernel = compile_program(program)
        sizes = _sizes(program, case.host_sizes)
        inputs = _inputs(program, sizes)
        error = _max_error(kernel.run_host(**inputs), reference(program, **inputs))
        _, full = _compile(case, root)  # the mapping a GPU run would use: its prediction
        results.append(
            Result(case.name, sizes, "host", error, full.mapping.predicted_time_s, **_machine_code(full))
        )
        print(f"{case.name}: host run at {sizes}: max error {error:.3g}", flush=True)
    return results


def run_gpu_cases(root: Path, cases=CASES, *, repeat: int = 20) -> list[Result]:
    """Kernels and baselines on the GPU, side by side, at the full sizes."""
    from polymap.runtime.gpu import cupy_module

    cp = cupy_module()
    results = []
    for case in cases:
        program, kernel = _compile(case, root)
        sizes = _sizes(program, case.sizes)
        inputs = _inputs(program, sizes, xp=cp)
        got = kernel(**inputs)
        want = _device_reference(case, inputs, cp)
        error = max(float(cp.abs(got[k] - want[k]).max()) for k in want)
        samples = tuple(kernel.time(repeat=repeat, **inputs))
        baselines = {
            b: tuple(_time(_baseline(b, case, inputs, sizes, cp), cp, repeat)) for b in case.baselines
        }
        result = Result(
            case.name,
            sizes,
            "gpu",
            error,
            kernel.mapping.predicted_time_s,
            samples,
            baselines,
            **_machine_code(kernel),
        )
        results.append(result)
        print(
            f"{case.name}: polymap {result.median_s * 1e6:.1f} us; "
            + "; ".join(f"{b} {statistics.median(s) * 1e6:.1f} us" for b, s in baselines.items())
            + f"; error {error:.3g}",
            flush=True,
        )
    return results


def _device_reference(case: Case, inputs: dict, cp) -> dict:
    """What each case computes, by CuPy (cuBLAS, elementwise): the same ground truth as the
    reference executor, which would take minutes at these sizes."""
    if case.model == "axpy.te":
        return {"z": inputs["alpha"] * inputs["x"] + inputs["y"]}
    if case.model == "transpose.te":
        return {"B": inputs["A"].T}
    if case.model == "matmul_strided_a.te":
        return {"C": cp.matmul(inputs["A"][:, ::32], inputs["B"])}
    return {"C": cp.matmul(inputs["A"], inputs["B"])}


def _baseline(name: str, case: Case, inputs: dict, sizes: dict, cp) -> Callable[[], None]:
    if name == "copy":
        count = case.bytes_moved(sizes) // 8  # a copy reads and writes: same bytes as the kernel
        src, dst = cp.empty(count, cp.float32), cp.empty(count, cp.float32)
        return lambda: dst.__setitem__(slice(None), src)
    if name == "cublas":
        a = inputs["A"] if case.model != "matmul_strided_a.te" else cp.ascontiguousarray(inputs["A"][:, ::32])
        return lambda: cp.matmul(a, inputs["B"])
    if name == "naive":
        fn = cp.RawKernel(NAIVE_STRIDED, "naive_strided")
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        c = cp.empty((m, n), cp.float32)
        grid = ((n + 127) // 128, m, 1)
        return lambda: fn(
            grid, (128, 1, 1), (inputs["A"], inputs["B"], c, np.int32(m), np.int32(n), np.int32(k))
        )
    raise ValueError(name)


def _time(run: Callable[[], None], cp, repeat: int) -> list[float]:
    for _ in range(3):
        run()
    samples = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return samples


def kernels_markdown(results: list[Result], *, device: str, command: str, machine: str) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"# Generated kernels against baselines, {stamp}",
        "",
        f"Command: `{command}`. Device: {device}. Host: {machine}.",
        "",
    ]
    if all(r.where == "host" for r in results):
        lines += [
            "No GPU on this machine: every case ran its correctness part on the host (the emitted CUDA source",
            "compiled by the host C++ compiler, at reduced sizes, against the reference executor).",
            "**GPU timings are pending**; the predicted times are the optimizer's model at the full sizes.",
            "",
            "| case | host sizes | max error vs reference | predicted at full size (us) |",
            "| --- | --- | --- | --- |",
        ]
        for r in results:
            lines.append(f"| {r.case} | {r.sizes} | {r.max_error:.3g} | {r.predicted_s * 1e6:.4g} |")
        return "\n".join(lines + machine_code_markdown(results)) + "\n"
    lines += [
        "Median of the CUDA-event timings; ratio = baseline time / polymap time (1.0: as fast as the baseline).",
        "",
        "| case | polymap (us) | predicted (us) | baseline | baseline (us) | ratio | max error |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for k, (name, samples) in enumerate(r.baselines.items()):
            base = statistics.median(samples)
            lines.append(
                f"| {r.case if k == 0 else ''} | {r.median_s * 1e6:.2f} | {r.predicted_s * 1e6:.4g} | {name} | "
                f"{base * 1e6:.2f} | {base / r.median_s:.3f} | {r.max_error:.3g} |"
            )
    lines += ["", "## Raw samples (us)", ""]
    for r in results:
        lines.append(f"- {r.case} {r.sizes}: polymap {[round(s * 1e6, 2) for s in r.samples_s]}")
        for name, samples in r.baselines.items():
            lines.append(f"  - {name}: {[round(s * 1e6, 2) for s in samples]}")
    return "\n".join(lines + machine_code_markdown(results)) + "\n"


def machine_code_markdown(results: list[Result]) -> list[str]:
    """The machine-code table of the record: counts of the code, not timings."""
    lines = [
        "",
        "## Machine code of the full-size kernels (sm_90, NVRTC + cuobjdump; counts, not timings)",
        "",
        "| case | kernel | threads | registers (ptxas / model) | stack (B) | shared (B) | blocks/SM "
        "(limit) | hot loop: instructions | FMA | FMA share | FMA per LDS | widest load (bits) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if r.machine_code_error:
            lines.append(f"| {r.case} | (not read: {r.machine_code_error}) |" + " |" * 10)
        for k in r.machine_code:
            hot = k.hot
            per_load = hot.fma_per_shared_load if hot is not None else None
            lines.append(
                f"| {r.case} | {k.function} | {k.threads_per_block} | {k.resources.registers} / "
                f"{k.model_registers} | {k.resources.stack} | {k.resources.shared} | "
                f"{k.occupancy.blocks_per_sm} ({k.occupancy.limiter}) | "
                + (
                    f"{hot.instructions} | {hot.fma} | {hot.fma_share:.1%} | "
                    f"{'-' if per_load is None else f'{per_load:.2f}'} | {hot.widest_load_bits} |"
                    if hot is not None
                    else "no loop | | | | |"
                )
            )
    return lines
