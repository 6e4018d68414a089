"""What optimize returns: the concrete decisions, the cost they are predicted to have, and
SCIP's own account of the solve."""

from __future__ import annotations

from dataclasses import dataclass

from polymap.ir.nodes import Program
from polymap.mapping.outcome import SolveReport
from polymap.mapping.space import KernelMapping
from polymap.targets import GpuTarget


@dataclass(frozen=True, slots=True)
class AccessCost:
    """One global-memory access of a kernel under the chosen mapping."""

    statement: str
    access: str  # as written, e.g. "B[k, j]"
    is_write: bool
    lane_stride: int  # elements between neighbouring lanes of a warp (bounded over the domain)
    sectors_per_request: int  # 32-byte sectors one warp request touches (1..32)
    requests: int  # warp requests (instances / 32)
    bytes: int  # sectors_per_request * 32 * requests (0 for a read served from shared memory)
    from_shared: bool = False  # a staged read: served from the shared-memory tile


@dataclass(frozen=True, slots=True)
class KernelCost:
    kernel: str
    accesses: tuple[AccessCost, ...]
    flops: int
    threads: int  # threads launched (all blocks)
    blocks: int
    threads_per_block: int
    fill: float  # fraction of the GPU's resident threads the launch fills (<= 1)
    memory_s: float
    compute_s: float
    time_s: float  # max(memory, compute) / fill: the predicted time
    launches: int  # host-loop iterations launching it
    shared_bytes: int = 0  # shared memory per block (staged tiles, padding included)
    registers: int = 0  # the model's estimate of registers per thread


@dataclass(frozen=True, slots=True)
class Mapping:
    """A mapped program: one KernelMapping per kernel, its predicted cost, SCIP's report
    per kernel, and the sizes the cost was estimated at (the mapping itself is verified
    for every size of the context)."""

    program: Program
    target: GpuTarget
    kernels: tuple[KernelMapping, ...]
    costs: tuple[KernelCost, ...]
    solver: tuple[SolveReport, ...]  # SCIP's report per kernel
    cost_sizes: tuple[tuple[str, int], ...]
    proofs: tuple[str, ...] = ()  # what verify proved, one line per obligation
    context: str | None = None  # the constraints on the symbolic sizes it was proved for

    @property
    def predicted_time_s(self) -> float:
        return sum(c.time_s * c.launches for c in self.costs)

    def kernel(self, name: str) -> KernelMapping:
        for k in self.kernels:
            if k.kernel.name == name:
                return k
        raise KeyError(name)

    def __str__(self) -> str:
        from polymap.mapping.report import format_mapping

        return format_mapping(self)
