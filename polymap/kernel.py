"""``polymap.compile``: a mapped program as a CUDA kernel you can read, run and export.

``Kernel.source`` is the CUDA C text (``codegen/cuda.py``). Calling the kernel runs it on
the GPU through CuPy; ``run_host`` runs the same text on the host (``runtime/host.py``);
``ptx`` compiles it with NVRTC for an sm_XX target without needing a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polymap.codegen.cuda import CudaProgram
from polymap.ir.nodes import Program
from polymap.ir.validate import check_program_argument
from polymap.mapping.result import Mapping
from polymap.pipeline import compile_program
from polymap.targets import GpuTarget


@dataclass(frozen=True, slots=True, eq=False)
class Kernel:
    """A compiled program: its mapping, its CUDA C, and ways to run it."""

    cuda: CudaProgram

    @property
    def source(self) -> str:
        return self.cuda.source

    @property
    def mapping(self) -> Mapping:
        return self.cuda.mapping

    @property
    def program(self) -> Program:
        return self.cuda.program

    @property
    def launcher(self) -> str:
        """The ``extern "C"`` function that runs the whole program (see the emitted file)."""
        return self.cuda.launcher

    def __repr__(self) -> str:
        return f"<Kernel {self.cuda.summary()}>"

    def __call__(self, **arrays: Any) -> dict[str, Any]:
        """Run on the GPU (CuPy): NumPy inputs give NumPy outputs; GPU arrays of any library
        (``__cuda_array_interface__`` or DLPack: CuPy, PyTorch, JAX) stay on the device, and the
        outputs come back as the caller's array type where its library has ``from_dlpack``
        (else as CuPy arrays)."""
        from polymap.runtime.gpu import run_gpu

        return run_gpu(self.cuda, arrays)

    def run_host(self, **arrays: Any) -> dict[str, Any]:
        """Run the same source on the host C++ compiler's build (no GPU needed)."""
        from polymap.runtime.host import run_host

        return run_host(self.cuda, arrays)

    def time(self, arrays: dict[str, Any] | None = None, /, *, repeat: int = 20, **named: Any):
        """The GPU's time per run of all the kernels (:class:`polymap.runtime.timing.Timing`:
        ``samples_s``, one per repetition, each the CUDA-event time of a graph replay of
        back-to-back runs divided by their number, so the host's launch work is not counted).
        The arrays by keyword, or as a dict (for an input named ``repeat``)."""
        from polymap.errors import ArgumentError
        from polymap.runtime.gpu import time_gpu

        both = set(arrays or {}) & set(named)
        if both:
            raise ArgumentError(
                f"kernel.time: {', '.join(sorted(both))} given twice (in the dict and by keyword)"
            )
        return time_gpu(self.cuda, {**(arrays or {}), **named}, repeat=repeat)

    def header(self, source_name: str = "the emitted .cu file") -> str:
        """A C/C++ header declaring the launcher, each argument described (``source_name``:
        the file that defines it)."""
        from polymap.codegen.header import launcher_header

        return launcher_header(self.cuda, source_name)

    def ptx(self, arch: str = "sm_90") -> str:
        """The PTX NVRTC makes of the source (raises CudaCompileError with NVRTC's log)."""
        from polymap.runtime.nvrtc import compile_ptx

        return compile_ptx(self.source, name=f"{self.launcher}.cu", arch=arch)

    def machine_code(self, target: str | GpuTarget | None = None):
        """The machine code NVRTC makes of the source for the target's architecture, read with
        cuobjdump: registers, stack, shared memory, occupancy and the hot loop's instruction
        mix per kernel (:class:`polymap.machine_code.MachineCodeReport`; no GPU needed)."""
        from polymap.machine_code import inspect_kernel
        from polymap.targets import get_target

        return inspect_kernel(self, get_target(target) if target is not None else None)

    def __str__(self) -> str:
        return self.source


def compile(
    program: Program,
    mapping: Mapping | None = None,
    target: str | GpuTarget = "h100",
    *,
    pins=None,
    context: str | None = None,
    time_limit: float | None = None,
    reassociate: bool = True,
    deterministic: bool = True,
) -> Kernel:
    """Compile ``program`` to CUDA C. Without a ``mapping``, ``optimize`` chooses one (with
    ``pins``, ``context``, ``time_limit``, ``reassociate`` and ``deterministic``); a given mapping is proved again with isl
    before any code is generated, so a hand-made mapping cannot produce wrong code.
    The steps are ``polymap.pipeline.compile_program``."""
    check_program_argument(program, "compile")
    return Kernel(
        compile_program(
            program,
            mapping,
            target,
            pins=pins,
            context=context,
            time_limit=time_limit,
            reassociate=reassociate,
            deterministic=deterministic,
        )
    )
