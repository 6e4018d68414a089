"""The C of a kernel with lanes (``mapping/lanes.py``): the fork before each spread loop and
the join after it (``schedule/lane_syncs.py`` places them), and the header's lines.

A warp is one band point (threadIdx.x is the lane, 32 lanes), so every shuffle names the
whole warp (mask 0xffffffff): the band's guards hold or fail for all of its lanes alike, and
the forks and joins sit under no condition on the lane (checked when the kernel is printed).

A point of several warps is a block (``KernelMapping.lanes`` of 64 to 1024, no band loop with
threads), and its forks and joins meet at ``__syncthreads`` (under no condition on any
thread, checked alike). Lane 0 shares its values through shared memory (``BlockTree``): at
the fork, after a barrier that makes its global writes seen, it stores each broadcast local
and each ``max=``/``min=`` start, and after a second barrier every lane loads them. At the
join each warp combines its lanes' partials by the butterfly (an online sum's maximum and
sums together: ``pm_lanes_online``), its lane 0 stores the warp's
partial, and after a barrier every lane combines the warps' partials in warp order, so all
lanes hold one value. A join's barrier also makes every lane's global writes seen. The
shared arrays are reused only by the same fork or join of the thread's next point, and a
barrier of the fork between them orders the reuse after every lane's loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from polymap.ir.nodes import AssignOp
from polymap.schedule.program import WARP_LANES, KernelMapping, SpreadLoop

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


@dataclass(frozen=True, slots=True)
class BlockTree:
    """The shared memory of a spread loop's fork and join where a point has ``warps`` warps:
    per accumulator an array of one partial per warp, per value lane 0 shares (a broadcast
    local, or the start of a ``max=``/``min=`` accumulator) one element; C names."""

    warps: int
    partials: tuple[tuple[str, str], ...]  # (accumulator, its array)
    shared: tuple[tuple[str, str], ...]  # (local, its element)

    @classmethod
    def of(cls, sp: SpreadLoop, warps: int, fresh: Callable[[str], str]) -> BlockTree:
        return cls(
            warps,
            tuple((name, fresh(f"{name}_warps")) for name, _ in sp.accumulators),
            tuple((name, fresh(f"{name}_shared")) for name in sp.from_lane0),
        )

    def declarations(self, c_type: Callable[[str], str]) -> list[str]:
        """The ``__shared__`` arrays, at the top of the kernel (``c_type``: a local's C type)."""
        lines = [f"__shared__ {c_type(name)} {array}[{self.warps}];" for name, array in self.partials]
        return lines + [f"__shared__ {c_type(name)} {element};" for name, element in self.shared]


def fork_lines(
    sp: SpreadLoop, lane: str, c_name: Callable[[str], str], tree: BlockTree | None = None
) -> list[str]:
    """Before the spread loop: lane 0's values of the loop's locals reach every lane (a
    ``max=``/``min=`` accumulator starts from it too: both are idempotent), the other
    accumulators start at the identity on lanes other than 0, and lane 0's global writes
    are seen by every lane (``__syncwarp``; with a ``tree``, a block's ``__syncthreads``
    and shared memory: the module docstring)."""
    count = WARP_LANES * (1 if tree is None else tree.warps)
    where = f"the {count} lanes" + ("" if tree is None else " of the block")
    lines = [f"// fork: loop '{sp.index}' runs on {where}, iteration {sp.index} on lane {sp.index} % {count}"]
    lines.append("__syncthreads();" if tree is not None else f"__syncwarp({FULL_WARP});")
    for name, op in sp.accumulators:
        if op in IDENTITY:
            lines.append(f"if ({lane} != 0) {c_name(name)} = {IDENTITY[op]};")
        elif tree is None:
            lines.append(f"{c_name(name)} = __shfl_sync({FULL_WARP}, {c_name(name)}, 0);")
    if tree is None:
        for name in sp.broadcasts:
            lines.append(f"{c_name(name)} = __shfl_sync({FULL_WARP}, {c_name(name)}, 0);")
        return lines
    if tree.shared:
        stores = " ".join(f"{element} = {c_name(name)};" for name, element in tree.shared)
        lines.append(f"if ({lane} == 0) {{ {stores} }}")
        lines.append("__syncthreads();")
        lines += [f"{c_name(name)} = {element};" for name, element in tree.shared]
    return lines


def join_lines(
    sp: SpreadLoop, lane: str, c_name: Callable[[str], str], tree: BlockTree | None = None
) -> list[str]:
    """After the spread loop: every lane's global writes are seen by lane 0, and each
    accumulator combines the partials of all lanes (of the warp by its butterfly; with a
    ``tree``, then of the block's warps through shared memory, in warp order)."""
    done = "the lanes' partial results of" if sp.accumulators else "every lane's writes seen, the end of"
    lines = [f"// join: {done} loop '{sp.index}'"]
    if tree is None:
        lines.append(f"__syncwarp({FULL_WARP});")
    elif not sp.accumulators:
        lines.append("__syncthreads();")
    paired = {top for top, _ in sp.online} | set(sp.relative_to)  # combined as groups, below
    for top, totals in sp.online:
        lines.append(f"pm_lanes_online({', '.join(c_name(n) for n in (top, *totals))});")
    for name, op in sp.accumulators:
        if name not in paired:
            lines.append(f"{c_name(name)} = {COMBINE[op]}({c_name(name)});")
    if tree is None or not sp.accumulators:
        return lines
    stores = " ".join(f"{array}[{lane} / {WARP_LANES}] = {c_name(name)};" for name, array in tree.partials)
    lines.append(f"if ({lane} % {WARP_LANES} == 0) {{ {stores} }}")
    lines.append("__syncthreads();  // the warps' partials, and every lane's writes, seen by every lane")
    ops, arrays = dict(sp.accumulators), dict(tree.partials)
    for name, array in tree.partials:  # pm_ names are never the program's (codegen/cnames.py)
        lines.append(f"{c_name(name)} = {array}[0];")
        if name not in paired:
            combined = _combined(ops[name], c_name(name), f"{array}[pm_w]")
            lines.append(f"for (int pm_w = 1; pm_w < {tree.warps}; ++pm_w) {c_name(name)} = {combined};")
    for top, totals in sp.online:  # the warps' groups in warp order, as a lane's butterfly step
        m = c_name(top)
        sums = " ".join(
            f"{c_name(t)} = {c_name(t)} * pm_mine + {arrays[t]}[pm_w] * pm_theirs;" for t in totals
        )
        lines.append(
            f"for (int pm_w = 1; pm_w < {tree.warps}; ++pm_w) {{ auto pm_mine = {m}, pm_theirs = {m}; "
            f"pm_online_rescale({m}, {arrays[top]}[pm_w], pm_mine, pm_theirs); {sums} }}"
        )
    return lines


def _combined(op: AssignOp, left: str, right: str) -> str:
    """``left op right`` in C, as the butterfly combines (polymap_helpers.cuh)."""
    if op is AssignOp.MAX:
        return f"pm_max({left}, {right})"
    if op is AssignOp.MIN:
        return f"pm_min({left}, {right})"
    return f"{left} {'+' if op is AssignOp.ADD else '*'} {right}"


def lanes_header(km: KernelMapping, is_float: Callable[[str], bool]) -> list[str]:
    """The header's lines on a kernel's lanes: which loops, and which float sums or products
    they reorder (``is_float``: whether a buffer is a float)."""
    if km.lanes <= 1:
        return []
    loops = ", ".join(km.spread_place(sp) for sp in km.spread)
    per_point = (
        "a warp per point"
        if km.lanes <= WARP_LANES
        else f"{km.lanes // WARP_LANES} warps per point (a block each)"
    )
    lines = [f"  {per_point}: loops {loops} run on its {km.lanes} lanes, the rest on lane 0"]
    if km.shared_locals:
        lines.append(
            f"  {', '.join(km.shared_locals)}: one copy per point in shared memory, shared by its lanes"
        )
    for sp in km.spread:
        reordered = [
            sp.reduction_text(name, op) for name, op in sp.accumulators if op in IDENTITY and is_float(name)
        ]
        if reordered:
            lines.append(
                f"  loop {km.spread_place(sp)} reorders the float reduction {', '.join(reordered)} "
                "(reassociate=False or --no-reassociate keeps the program's order)"
            )
    return lines
