"""The C of a kernel with lanes (``mapping/lanes.py``): the fork before each spread loop and
the join after it (``schedule/lane_syncs.py`` places them), and the header's lines.

A warp is one band point (threadIdx.x is the lane, 32 lanes), so every shuffle names the
whole warp (mask 0xffffffff): the band's guards hold or fail for all of its lanes alike, and
the forks and joins sit under no condition on the lane (checked when the kernel is printed).
"""

from __future__ import annotations

from collections.abc import Callable

from polymap.ir.nodes import AssignOp
from polymap.schedule.program import KernelMapping, SpreadLoop

FULL_WARP = "0xffffffffu"
# the start of a lane's partial result: the operator's identity
IDENTITY = {AssignOp.ADD: "0", AssignOp.MUL: "1"}
# the butterfly of a join (polymap_helpers.cuh): log2(32) shuffles, after which each lane
# holds the combination of all 32 partials
COMBINE = {
    AssignOp.ADD: "pm_lanes_add",
    AssignOp.MUL: "pm_lanes_mul",
    AssignOp.MAX: "pm_lanes_max",
    AssignOp.MIN: "pm_lanes_min",
}


def fork_lines(sp: SpreadLoop, lane: str, c_name: Callable[[str], str]) -> list[str]:
    """Before the spread loop: lane 0's values of the loop's locals reach every lane (a
    ``max=``/``min=`` accumulator starts from it too: both are idempotent), the other
    accumulators start at the identity on lanes other than 0, and lane 0's global writes
    are seen by every lane (``__syncwarp``)."""
    lines = [f"// fork: loop '{sp.index}' runs on the 32 lanes, iteration {sp.index} on lane {sp.index} % 32"]
    lines.append(f"__syncwarp({FULL_WARP});")
    for name, op in sp.accumulators:
        if op in IDENTITY:
            lines.append(f"if ({lane} != 0) {c_name(name)} = {IDENTITY[op]};")
        else:
            lines.append(f"{c_name(name)} = __shfl_sync({FULL_WARP}, {c_name(name)}, 0);")
    for name in sp.broadcasts:
        lines.append(f"{c_name(name)} = __shfl_sync({FULL_WARP}, {c_name(name)}, 0);")
    return lines


def join_lines(sp: SpreadLoop, c_name: Callable[[str], str]) -> list[str]:
    """After the spread loop: every lane's global writes are seen by lane 0, and each
    accumulator combines the 32 partials."""
    done = "the lanes' partial results of" if sp.accumulators else "every lane's writes seen, the end of"
    lines = [f"// join: {done} loop '{sp.index}'"]
    lines.append(f"__syncwarp({FULL_WARP});")
    for name, op in sp.accumulators:
        lines.append(f"{c_name(name)} = {COMBINE[op]}({c_name(name)});")
    return lines


def lanes_header(km: KernelMapping, is_float: Callable[[str], bool]) -> list[str]:
    """The header's lines on a kernel's lanes: which loops, and which float sums or products
    they reorder (``is_float``: whether a buffer is a float)."""
    if km.lanes <= 1:
        return []
    loops = ", ".join(km.spread_place(sp) for sp in km.spread)
    lines = [f"  a warp per point: loops {loops} run on its {km.lanes} lanes, the rest on lane 0"]
    for sp in km.spread:
        reordered = [
            f"{name} {op.value}" for name, op in sp.accumulators if op in IDENTITY and is_float(name)
        ]
        if reordered:
            lines.append(
                f"  loop {km.spread_place(sp)} reorders the float reduction {', '.join(reordered)} "
                "(reassociate=False keeps the program's order)"
            )
    return lines
