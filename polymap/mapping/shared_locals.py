"""What a kernel's shared arrays cost (``SpreadLoop.shared``).

With lanes, a block-local array that a spread loop touches is kept once per band point in
shared memory (``codegen/cuda.py``), not in each thread's registers: it leaves the
register estimate and enters the block's shared memory, and each of its accesses is a
shared-memory load or store:

* in a spread loop, a warp instruction per 32 instances (the lanes run 32 iterations at
  once), taking as many wavefronts as its worst bank holds words of the warp's 32
  addresses: lanes ``stride`` elements apart (``lane_stride``, exact by isl, as a global
  access's) touch ``gcd(stride * bytes / 4, 32)`` words of one bank where the step is a
  whole word (1 where it is 0: every lane reads one word, a broadcast);
* outside spread loops, lane 0's alone: an instruction and a wavefront per instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polymap.mapping.accesses import (
    gathered_extents,
    gathered_stride,
    isl_stride,
    kernel_statements,
    row_strides,
)
from polymap.mapping.space import Kernel, SpreadLoop, shared_arrays
from polymap.poly.model import PolyModel

BANK_BYTES = 4  # a shared-memory bank serves one 4-byte word per wavefront


@dataclass(frozen=True, slots=True)
class SharedLocalAccess:
    """One access of a statement to a shared array, per launch."""

    statement: str
    text: str
    buffer: str
    is_write: bool
    element_bytes: int
    instances: int
    lane_stride: int | None  # elements between neighbouring lanes' addresses; None: lane 0's

    def requests(self, warp: int) -> int:
        """Warp instructions: one per ``warp`` instances in a spread loop, else one each."""
        return self.instances if self.lane_stride is None else -(-self.instances // warp)

    def wavefronts(self, warp: int) -> int:
        """Shared-memory wavefronts (see the module docstring)."""
        if self.lane_stride is None:
            return self.instances
        step = self.lane_stride * self.element_bytes
        conflict = math.gcd(step // BANK_BYTES, warp) if step and step % BANK_BYTES == 0 else 1
        wide = max(1, self.element_bytes // BANK_BYTES)  # an 8-byte element spans two banks
        return self.requests(warp) * max(conflict, wide)


def shared_local_accesses(
    kernel: Kernel, model: PolyModel, spread: tuple[SpreadLoop, ...], launches: int = 1
) -> tuple[SharedLocalAccess, ...]:
    """The accesses of ``kernel``'s statements to the arrays its ``spread`` loops share."""
    shared = shared_arrays(spread)
    if not shared:
        return ()
    names = {s.name for s in kernel_statements(kernel)}
    found = []
    for stmt in model.statements:
        if stmt.name not in names:
            continue
        loop = next((sp for sp in spread if stmt.name in sp.statements), None)
        instances = model.instance_count(stmt.name) // max(1, launches)
        isl_names = {user: model.names[user] for user in stmt.ctx.indices}
        for access in stmt.accesses:
            if access.buffer not in shared:
                continue
            decl = model.program.buffer(access.buffer)
            stride = None
            if loop is not None:  # a gathered index: any two of its dimension (``gathered_stride``)
                strides, step = row_strides(decl), {loop.index: 1}
                extents = tuple(gathered_extents(access, decl).items())
                worst, rest = gathered_stride(access.indices, extents, strides, step)
                stride = worst + isl_stride(stmt.loops_domain, rest, strides, isl_names, step)
            found.append(
                SharedLocalAccess(
                    stmt.name,
                    access.text,
                    access.buffer,
                    access.is_write,
                    decl.dtype.itemsize,
                    instances,
                    stride,
                )
            )
    return tuple(found)
