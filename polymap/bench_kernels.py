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

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from polymap.compare import compare_output
from polymap.errors import PolymapError
from polymap.ir.parse import load
from polymap.kernel import Kernel
from polymap.kernel import compile as compile_program
from polymap.poly.affinity import analyze_binding_defaults
from polymap.reference import reference
from polymap.runtime.arguments import random_inputs
from polymap.runtime.host_sizes import host_run_sizes
from polymap.runtime.timing import Timing, time_device

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
    host_sizes: dict[str, int] | None  # reduced sizes for the host run (None: fitted to HOST_FLOPS)
    baselines: tuple[str, ...]
    bytes_moved: Callable[[dict[str, int]], int] = field(default=lambda s: 0)
    given: bool = False  # a model named on the command line: checked by the reference executor


def model_case(path: Path) -> Case:
    """A model named to ``bench --kernels``: timed at its default sizes next to a
    device-to-device copy of its compulsory bytes (each input read once, each output
    written once: the floor of any kernel that is bound by memory), checked against the
    reference executor at those sizes."""
    return Case(path.stem, str(path), {}, None, ("copy",), given=True)


def compulsory_bytes(inputs: dict, outputs: dict) -> int:
    """Bytes every correct kernel moves at least: its inputs read, its outputs written."""
    return sum(int(a.nbytes) for a in inputs.values()) + sum(int(a.nbytes) for a in outputs.values())


CASES = (
    Case("axpy 2^26", "models/axpy.te", {}, {"N": 1000}, ("copy",), lambda s: 3 * 4 * s["N"]),
    Case("matmul 256x256x32", "models/matmul_256x256x32.te", {}, {"M": 40, "N": 33, "K": 7}, ("cublas",)),
    Case("matmul 1024^3", "models/matmul_1024.te", {}, {"M": 33, "N": 65, "K": 9}, ("cublas",)),
    Case(
        "matmul 4096^3",
        "models/matmul_1024.te",
        {"M": 4096, "N": 4096, "K": 4096},
        {"M": 17, "N": 70, "K": 5},
        ("cublas",),
    ),
    Case(
        "matmul stride-32 A", "models/matmul_strided_a.te", {}, {"M": 9, "N": 40, "K": 6}, ("naive", "cublas")
    ),
    Case(
        "transpose 4096^2",
        "models/transpose.te",
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
    methods: dict[str, str] = field(default_factory=dict)  # "polymap" or baseline -> how it was timed
    ok: bool = True  # every output within the tolerance of ``polymap.compare`` (as ``polymap run``)
    # the full-size mapping's flops and the DRAM bytes of the model's traffic, every launch
    # counted (``roofline_figures``): where the case sits on the roofline
    flops: int = 0
    model_dram_bytes: float = 0.0

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.samples_s) if self.samples_s else None


def _sizes(program, given: dict[str, int]) -> dict[str, int]:
    defaults = {p.name: p.default for p in program.params if p.default is not None}
    return {**defaults, **given}


def _inputs(program, sizes: dict[str, int], xp=np, seed: int = 0) -> dict:
    return {name: xp.asarray(a) for name, a in random_inputs(program, sizes, seed).items()}


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line passes on to every case's compilation."""

    target: str = "h100"
    time_limit: float | None = None  # SCIP's, per kernel solve


def _compile(case: Case, root: Path, options: Options) -> tuple[object, Kernel]:
    program = load(root / case.model)
    program, _, _ = analyze_binding_defaults(program)  # flat buffers need their sizes bound
    if case.sizes:
        program = program.bind(**{k: v for k, v in case.sizes.items() if k in program.param_names})
    return program, compile_program(program, target=options.target, time_limit=options.time_limit)


def roofline_figures(kernel: Kernel) -> dict:
    """The ``Result`` fields that place a case on the roofline: its flops and the DRAM bytes
    of the cost model's traffic, summed over every launch of every kernel."""
    mapping = kernel.mapping
    bandwidth = mapping.target.dram_bandwidth
    return {
        "flops": sum(c.flops * c.launches for c in mapping.costs),
        "model_dram_bytes": sum(c.memory_s * bandwidth * c.launches for c in mapping.costs),
    }


def _machine_code(kernel: Kernel) -> dict:
    """The ``Result`` fields of ``kernel``'s machine code, or the reason it could not be read."""
    try:
        return {"machine_code": kernel.machine_code().kernels}
    except PolymapError as err:
        return {"machine_code_error": err.message}


def _checked(program, got: dict, want: dict) -> tuple[float, bool]:
    """The largest error over the outputs and whether each is within ``polymap.compare``'s
    tolerance (``polymap run``'s): equal values (infinities and NaNs too) differ by 0, and an
    error that is not finite (a NaN or an infinity on one side only) is infinite."""
    dtypes = {d.name: d.dtype for d in program.outputs}
    compared = [compare_output(k, dtypes[k], got[k], want[k]) for k in want]
    errors = [math.inf if c.get("max_abs_error") is None else c["max_abs_error"] for c in compared]
    return max(errors, default=0.0), all(c["ok"] for c in compared)


def run_host_cases(
    root: Path, cases=CASES, *, options: Options = Options(), say: Callable[[str], None] = print
) -> list[Result]:
    """The correctness part, on the host, at each case's reduced sizes."""
    results = []
    for case in cases:
        program = load(root / case.model)
        bound_defaults, _, _ = analyze_binding_defaults(program)
        if bound_defaults is not program:  # flat indices: bind the small sizes instead
            program = program.bind(
                **{k: v for k, v in (case.host_sizes or {}).items() if k in program.param_names}
            )
        kernel = compile_program(program, target=options.target, time_limit=options.time_limit)
        sizes = _sizes(program, case.host_sizes or {})
        if case.host_sizes is None:  # a model given: sizes the host runs in seconds
            sizes = host_run_sizes(kernel.cuda.model, sizes, given=set()).sizes
        inputs = _inputs(program, sizes)
        error, ok = _checked(program, kernel.run_host(**inputs), reference(program, **inputs))
        _, full = _compile(case, root, options)  # the mapping a GPU run would use: its prediction
        results.append(
            Result(
                case.name,
                sizes,
                "host",
                error,
                full.mapping.predicted_time_s,
                ok=ok,
                **_machine_code(full),
                **roofline_figures(full),
            )
        )
        say(f"{case.name}: host run at {sizes}: max error {error:.3g}" + ("" if ok else ", MISMATCH"))
    return results


def run_gpu_cases(
    root: Path,
    cases=CASES,
    *,
    repeat: int = 20,
    options: Options = Options(),
    say: Callable[[str], None] = print,
) -> list[Result]:
    """Kernels and baselines on the GPU, side by side, at the full sizes."""
    from polymap.runtime.gpu import cupy_module

    cp = cupy_module()
    results = []
    for case in cases:
        program, kernel = _compile(case, root, options)
        sizes = _sizes(program, case.sizes)
        inputs = _inputs(program, sizes, xp=cp)
        got = kernel(**inputs)
        error, ok = _checked(
            program, {k: v.get() for k, v in got.items()}, _expected(case, program, inputs, cp)
        )
        timing = kernel.time(repeat=repeat, **inputs)
        if case.given:
            moved = compulsory_bytes(inputs, got)
            case = replace(case, bytes_moved=lambda _sizes: moved)
        baselines = {
            b: time_device(_baseline(b, case, inputs, sizes, cp), repeat=repeat) for b in case.baselines
        }
        result = Result(
            case.name,
            sizes,
            "gpu",
            error,
            kernel.mapping.predicted_time_s,
            timing.samples_s,
            {b: t.samples_s for b, t in baselines.items()},
            methods={"polymap": _method(timing), **{b: _method(t) for b, t in baselines.items()}},
            ok=ok,
            **_machine_code(kernel),
            **roofline_figures(kernel),
        )
        results.append(result)
        say(
            f"{case.name}: polymap {result.median_s * 1e6:.1f} us; "
            + "; ".join(f"{b} {statistics.median(t.samples_s) * 1e6:.1f} us" for b, t in baselines.items())
            + f"; error {error:.3g}"
            + ("" if ok else ", MISMATCH")
        )
    return results


def _method(timing: Timing) -> str:
    """How a row was timed, for the record: the method and the runs per sample."""
    text = f"{timing.method}, {timing.runs_per_sample} runs/sample"
    return text + (f" (no graph: {timing.why_not_graph})" if timing.why_not_graph else "")


def _expected(case: Case, program, inputs: dict, cp) -> dict:
    """What each case computes, on the host: for the built-in cases computed by CuPy
    (cuBLAS, elementwise), the same ground truth as the reference executor, which would take
    minutes at these sizes; for a model given on the command line, the reference executor
    itself."""
    name = Path(case.model).name
    if case.given:
        return reference(program, **{k: cp.asnumpy(v) for k, v in inputs.items()})
    if name == "axpy.te":
        want = {"z": inputs["alpha"] * inputs["x"] + inputs["y"]}
    elif name == "transpose.te":
        want = {"B": inputs["A"].T}
    elif name == "matmul_strided_a.te":
        want = {"C": cp.matmul(inputs["A"][:, ::32], inputs["B"])}
    else:
        want = {"C": cp.matmul(inputs["A"], inputs["B"])}
    return {k: v.get() for k, v in want.items()}


def _baseline(name: str, case: Case, inputs: dict, sizes: dict, cp) -> Callable[[], None]:
    """The baseline's work as a call that only enqueues it on the current stream (its
    buffers made here, once), so that it can be captured and replayed like polymap's."""
    if name == "copy":
        count = case.bytes_moved(sizes) // 8  # a copy reads and writes: same bytes as the kernel
        src, dst = cp.ones(count, cp.float32), cp.empty(count, cp.float32)
        return lambda: dst.data.copy_from_device_async(src.data, 4 * count)  # cudaMemcpyAsync, D2D
    if name == "cublas":
        a = (
            inputs["A"]
            if Path(case.model).name != "matmul_strided_a.te"
            else cp.ascontiguousarray(inputs["A"][:, ::32])
        )
        c = cp.empty((a.shape[0], inputs["B"].shape[1]), cp.float32)
        return lambda: cp.matmul(a, inputs["B"], out=c)
    if name == "naive":
        fn = cp.RawKernel(NAIVE_STRIDED, "naive_strided")
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        c = cp.empty((m, n), cp.float32)
        grid = ((n + 127) // 128, m, 1)
        return lambda: fn(
            grid, (128, 1, 1), (inputs["A"], inputs["B"], c, np.int32(m), np.int32(n), np.int32(k))
        )
    raise ValueError(name)


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
            mark = "" if r.ok else " MISMATCH"
            lines.append(f"| {r.case} | {r.sizes} | {r.max_error:.3g}{mark} | {r.predicted_s * 1e6:.4g} |")
        return "\n".join(lines + machine_code_markdown(results)) + "\n"
    lines += [
        "Device time per run: the median over samples, each the CUDA-event time of a CUDA-graph replay of",
        "back-to-back runs divided by their number (`polymap.runtime.timing`; the host's launch work is not",
        "counted; inputs that fit stay in L2 between runs, for polymap and baselines alike). Ratio = baseline",
        "time / polymap time (1.0: as fast as the baseline). How each row was timed is under the raw samples.",
        "",
        "| case | polymap (us) | predicted (us) | baseline | baseline (us) | ratio | max error |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for k, (name, samples) in enumerate(r.baselines.items()):
            base = statistics.median(samples)
            lines.append(
                f"| {r.case if k == 0 else ''} | {r.median_s * 1e6:.2f} | {r.predicted_s * 1e6:.4g} | {name} | "
                f"{base * 1e6:.2f} | {base / r.median_s:.3f} | {r.max_error:.3g}{'' if r.ok else ' MISMATCH'} |"
            )
    lines += ["", "## Raw samples (us)", ""]
    for r in results:
        how = r.methods.get("polymap", "")
        lines.append(f"- {r.case} {r.sizes}: polymap ({how}) {[round(s * 1e6, 2) for s in r.samples_s]}")
        for name, samples in r.baselines.items():
            lines.append(f"  - {name} ({r.methods.get(name, '')}): {[round(s * 1e6, 2) for s in samples]}")
    return "\n".join(lines + machine_code_markdown(results)) + "\n"


def kernels_json(results: list[Result], *, device: str, command: str, machine: str) -> dict:
    """The record as JSON-ready data: what ``kernels_markdown`` shows, every sample in
    seconds, the medians, how each was timed, and the machine code's figures per kernel
    (``null`` where a figure does not exist: no GPU ran, no loop, no shared load)."""
    from polymap.mapping.export import finite_or_none

    def median(samples):
        return statistics.median(samples) if samples else None

    return {
        "format": 1,
        "command": command,
        "device": device,
        "host": machine,
        "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "timing": "device time per run: the median over samples, each a CUDA-graph replay of back-to-back "
        "runs divided by their number (work CuPy cannot capture: queued behind a spin kernel)",
        "cases": [
            {
                "case": r.case,
                "sizes": r.sizes,
                "where": r.where,
                "ok": r.ok,  # within polymap.compare's tolerance; max_error null: infinite or NaN
                "max_error": finite_or_none(r.max_error),
                "predicted_s": r.predicted_s,
                "median_s": r.median_s,
                "flops": r.flops,
                "model_dram_bytes": r.model_dram_bytes,
                "samples_s": list(r.samples_s),
                "method": r.methods.get("polymap"),
                "baselines": [
                    {
                        "baseline": name,
                        "median_s": median(samples),
                        "samples_s": list(samples),
                        "method": r.methods.get(name),
                        "ratio": median(samples) / r.median_s if r.median_s else None,
                    }
                    for name, samples in r.baselines.items()
                ],
                "machine_code": [_kernel_code_json(k) for k in r.machine_code],
                "machine_code_error": r.machine_code_error or None,
            }
            for r in results
        ],
    }


def _kernel_code_json(k) -> dict:
    hot = k.hot
    return {
        "kernel": k.function,
        "threads_per_block": k.threads_per_block,
        "registers": k.resources.registers,
        "model_registers": k.model_registers,
        # the function of the blocks at an edge (``codegen.cuda.EdgeFunction``; null: none)
        "edge_kernel": k.edge_function,
        "edge_registers": k.edge_resources.registers if k.edge_resources is not None else None,
        "edge_stack_bytes": k.edge_resources.stack if k.edge_resources is not None else None,
        "stack_bytes": k.resources.stack,
        "shared_bytes": k.resources.shared,
        "blocks_per_sm": k.occupancy.blocks_per_sm,
        "occupancy_limiter": k.occupancy.limiter,
        "hot_loop": None
        if hot is None
        else {
            "instructions": hot.instructions,
            "fma": hot.fma,
            "fma_share": hot.fma_share,
            "fma_per_shared_load": hot.fma_per_shared_load,
            "widest_load_bits": hot.widest_load_bits,
        },
    }


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
            if k.edge_resources is not None and k.edge_occupancy is not None:
                # the blocks at an edge: a function of their own, launched where there are any
                e, occ = k.edge_resources, k.edge_occupancy
                lines.append(
                    f"| {r.case} | {k.edge_function} (blocks at an edge, where there are any) | "
                    f"{k.threads_per_block} | {e.registers} / - | {e.stack} | {e.shared} | "
                    f"{occ.blocks_per_sm} ({occ.limiter}) | | | | | |"
                )
    return lines
