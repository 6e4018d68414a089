"""How many blocks of a kernel one SM holds at once, from what ptxas gave it.

The rules of the CUDA Occupancy Calculator (``polymap.targets`` [OCC]; the same arithmetic as
``cudaOccMaxBlocksPerSMRegsLimit`` in CUDA's ``cuda_occupancy.h``): a block is resident when
the SM has room for its warps, its registers (given per warp, rounded up to the target's
allocation unit, from one of the SM's sub-partitions: a quarter of the registers each), its
shared memory (rounded up, plus the per-block reserve) and a block slot. The smallest of the four limits is the occupancy; the report names which one.

The system's per-block reserve of shared memory is counted once. For sm_90, ptxas already
includes it in the SHARED figure of a kernel that declares shared memory (measured with NVRTC
13.5: a 128-byte ``__shared__`` array is reported as 1152 bytes, and 0 without one; for sm_80
the same array is 128 bytes): :func:`reserve_in_ptxas_figure` says when.
"""

from __future__ import annotations

from dataclasses import dataclass

from polymap.targets import GpuTarget

_ORDER = ("registers", "shared memory", "threads", "blocks")


@dataclass(frozen=True, slots=True)
class Occupancy:
    """Resident blocks and warps per SM, the fraction of the SM's warp slots they fill, and
    the resources that limit them (``registers``, ``shared memory``, ``threads`` or
    ``blocks``; several joined by "and" when they allow the same number)."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float
    limiter: str


def reserve_in_ptxas_figure(target: GpuTarget, shared_bytes: int) -> bool:
    """Whether ptxas's SHARED figure for ``target`` already holds the system's reserve."""
    return target.compute_capability >= (9, 0) and shared_bytes > 0


def occupancy(
    target: GpuTarget,
    *,
    threads_per_block: int,
    registers: int,
    shared_bytes: int,
    reserve_included: bool = False,
) -> Occupancy:
    """The occupancy of a block of ``threads_per_block`` threads of ``registers`` registers
    each and ``shared_bytes`` of shared memory on ``target``; ``reserve_included`` when
    ``shared_bytes`` already counts the system's per-block reserve."""
    warps = -(-threads_per_block // target.warp_size)
    limits = {
        "blocks": target.max_blocks_per_sm,
        "threads": target.max_warps_per_sm // warps,
    }
    if registers > 0:
        unit, parts = target.register_allocation_unit, target.register_sub_partitions
        per_warp = -(-registers * target.warp_size // unit) * unit
        # the hardware checks a block as if its warps filled every sub-partition alike
        assumed = per_warp * (-(-warps // parts) * parts)
        if registers > target.max_registers_per_thread or max(assumed, per_warp * warps) > (
            target.max_registers_per_block
        ):
            limits["registers"] = 0
        else:
            limits["registers"] = (target.registers_per_sm // parts // per_warp) * parts // warps
    unit = target.shared_memory_allocation_unit
    reserve = 0 if reserve_included else target.shared_memory_reserved_per_block
    per_block = -(-shared_bytes // unit) * unit + reserve
    limits["shared memory"] = target.shared_memory_per_sm // per_block
    blocks = min(limits.values())
    limiter = " and ".join(name for name in _ORDER if limits.get(name) == blocks)
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_sm=blocks * warps,
        fraction=blocks * warps / target.max_warps_per_sm,
        limiter=limiter,
    )
