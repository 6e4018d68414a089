"""Pictures of a mapping and of the predicted roofline (``polymap map --plot``, ``polymap
bench --plot``), drawn with matplotlib (the optional ``plot`` extra), as PNG, SVG or PDF by
the file's suffix.

A mapping's picture has one row per kernel:

* **who runs what**: the iterations of the band's loops on the thread axes x (across) and y
  (down), over the first two blocks along each, coloured by block; the cells of the first
  warp of the first block are outlined and those of its first thread marked, so the
  distribution (blocked or cyclic) and the thread's points show;
* **where a warp's first request goes**: for every access of the kernel's body to global
  memory, the bytes that the 32 lanes of that warp touch at their first point (and the first
  iteration of every loop inside the body), relative to the lowest one, over the sectors
  (32 bytes) of the memory system: one request of a coalesced access spans few sectors.

Both are computed from the program's index expressions and the mapping's formulas
``i = g*T*S + s*T + t`` (cyclic) or ``g*T*S + t*S + s`` (blocked) at the sizes the cost was
estimated at, not from the cost model: the picture is a check on the model's sector counts,
which the report prints next to each access.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polymap.errors import ArgumentError
from polymap.ir.nodes import Anchor, Assign, IndexExpr, Loop, Read, reads_of
from polymap.ir.walk import walk_block
from polymap.mapping.result import KernelCost, Mapping
from polymap.mapping.space import Distribution, KernelMapping, LoopMapping
from polymap.poly.isl_text import evaluate_index

FORMATS = (".png", ".svg", ".pdf")
MAX_CELLS = 64  # iterations drawn along an axis at most (two blocks, capped)


def _pyplot():
    """matplotlib's pyplot without a display (Agg), or a clear error naming the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ArgumentError(
            "pictures need matplotlib: pip install 'polymap[plot]' (or pip install matplotlib)"
        ) from None
    return plt


def checked_plot_path(path: str | Path) -> Path:
    """``path`` where a picture can be written: a known suffix, an existing directory."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ArgumentError(
            f"--plot {path}: the file must end in {', '.join(FORMATS)} (the picture's format)"
        )
    if not path.parent.exists() or not path.parent.is_dir():
        raise ArgumentError(f"--plot {path}: the directory {path.parent} does not exist")
    return path


def _save(fig, path: Path) -> None:
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    except OSError as err:
        raise ArgumentError(f"--plot {path}: cannot write the picture: {err.strerror or err}") from None


# ----------------------------------------------------------------- a mapping


@dataclass(frozen=True, slots=True)
class Point:
    """Where iteration ``index`` of one band loop runs: block, thread and s-point along it."""

    block: int
    thread: int
    point: int


def locate(loop: LoopMapping, index: int) -> Point:
    """The inverse of the loop's formula: which block, thread and point run ``index``."""
    span = loop.threads * loop.seq
    block, rest = divmod(index, span)
    if loop.distribution is Distribution.CYCLIC:
        point, thread = divmod(rest, loop.threads)
    else:
        thread, point = divmod(rest, loop.seq)
    return Point(block, thread, point)


def place(loop: LoopMapping, block: int, thread: int, point: int) -> int:
    """The loop's formula: the iteration that ``block``, ``thread`` and ``point`` run."""
    span = loop.threads * loop.seq
    if loop.distribution is Distribution.CYCLIC:
        return block * span + point * loop.threads + thread
    return block * span + thread * loop.seq + point


@dataclass(frozen=True, slots=True)
class WarpRequest:
    """The byte addresses of one access by the lanes of the first warp at their first point."""

    text: str
    is_write: bool
    addresses: tuple[int, ...]  # one per lane that has an iteration there
    sector_bytes: int  # the unit a request moves (``GpuTarget.sector_bytes``)

    @property
    def sectors(self) -> int:
        return len({a // self.sector_bytes for a in self.addresses})


def warp_requests(mapping: Mapping, km: KernelMapping) -> list[WarpRequest]:
    """Every access of the kernel's body to a program-wide buffer, as the lanes of the first
    warp of block 0 issue it at s-point 0, the loops inside the body at their first
    iteration, host loops at 0 (lanes whose iteration is outside the band are left out)."""
    program = mapping.program
    sizes = dict(program.bindings) | dict(mapping.cost_sizes)
    block = km.block_dim()
    warp = mapping.target.warp_size
    lanes = []
    for lane in range(min(warp, math.prod(block))):
        t = (lane % block[0], lane // block[0] % block[1], lane // (block[0] * block[1]))
        env = dict(sizes) | {loop.index: 0 for loop in km.kernel.host_loops}
        inside = True
        for lm in km.loops:
            env[lm.index] = place(lm, 0, t[lm.thread_axis.position], 0)
            inside = inside and env[lm.index] < evaluate_index(lm.extent, env)
        if inside:
            lanes.append(env)
    globals_ = {d.name: d for d in program.buffers}
    inner = {s.index: 0 for s in walk_block(km.kernel.body) if isinstance(s, Loop)}
    requests, seen = [], set()
    for stmt in walk_block(km.kernel.body):
        if not isinstance(stmt, (Assign, Anchor)):
            continue
        touched = [(r.buffer, r.indices, False) for r in reads_of(stmt.value)]
        if isinstance(stmt, Assign):
            touched.append((stmt.buffer, stmt.indices, True))
        for buffer, indices, is_write in touched:
            key = (buffer, indices, is_write)
            if buffer not in globals_ or key in seen:
                continue
            seen.add(key)
            decl = globals_[buffer]
            text = f"{'write' if is_write else 'read'} {Read(buffer, indices)}"
            addresses = tuple(
                _offset(indices, decl.shape, env | inner) * decl.dtype.itemsize for env in lanes
            )
            requests.append(WarpRequest(text, is_write, addresses, mapping.target.sector_bytes))
    return requests


def _offset(indices: tuple[IndexExpr, ...], shape: tuple[IndexExpr, ...], env: dict) -> int:
    """The row-major element offset of an access."""
    offset = 0
    for index, extent in zip(indices, shape):
        offset = offset * evaluate_index(extent, env) + evaluate_index(index, env)
    return offset


def _grid(km: KernelMapping, sizes: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Per drawn cell (y, x): the block's number, whether the first warp of block 0 runs it,
    and whether its first thread does; and the two axes' names. A loop off x and y (z, or a
    band of one loop) is held at its first iteration."""
    by_axis = {lm.thread_axis.value: lm for lm in km.loops}
    across, down = by_axis.get("x"), by_axis.get("y")
    env = dict(sizes)
    for lm in km.loops:
        env[lm.index] = 0

    def cells(lm: LoopMapping | None) -> int:
        if lm is None:
            return 1
        return max(1, min(MAX_CELLS, 2 * lm.threads * lm.seq, evaluate_index(lm.extent, env)))

    width, height = cells(across), cells(down)
    block = np.zeros((height, width), int)
    warp = np.zeros((height, width), bool)
    first = np.zeros((height, width), bool)
    tx = km.block_dim()[0]
    for y in range(height):
        for x in range(width):
            gx, t_x, _ = _at(across, x)
            gy, t_y, _ = _at(down, y)
            block[y, x] = gy * 2 + gx
            lane = t_x + tx * t_y
            warp[y, x] = gx == 0 and gy == 0 and lane < 32
            first[y, x] = gx == 0 and gy == 0 and lane == 0
    names = [across.index if across else "-", down.index if down else "-"]
    return block, warp, first, names


def _at(lm: LoopMapping | None, index: int) -> tuple[int, int, int]:
    if lm is None:
        return 0, 0, 0
    p = locate(lm, index)
    return p.block, p.thread, p.point


def plot_mapping(mapping: Mapping, path: str | Path) -> Path:
    """Draw ``mapping`` (see the module docstring) into ``path``; returns it."""
    path = checked_plot_path(path)
    plt = _pyplot()
    from matplotlib.patches import Rectangle

    kernels = list(mapping.kernels)
    fig, axes = plt.subplots(len(kernels), 2, figsize=(12, 3.6 * len(kernels)), squeeze=False)
    sizes = dict(mapping.program.bindings) | dict(mapping.cost_sizes)
    for row, (km, cost) in enumerate(zip(kernels, mapping.costs)):
        left, right = axes[row]
        name = km.kernel.name
        if km.kernel.is_serial:
            left.text(0.5, 0.5, f"{name}: a serial kernel (one thread)", ha="center", va="center")
            left.set_axis_off()
        else:
            block, warp, first, (across, down) = _grid(km, sizes)
            left.imshow(block, cmap="Pastel1", vmin=0, vmax=8, aspect="auto", interpolation="nearest")
            for y, x in zip(*np.nonzero(warp)):
                left.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="black", lw=0.8))
            ys, xs = np.nonzero(first)
            left.scatter(xs, ys, s=12, c="crimson", label="thread 0")
            left.set_xlabel(f"{across} (threads on x)")
            left.set_ylabel(f"{down} (threads on y)")
            grid, blocks = km.grid_dim(), km.block_dim()
            left.set_title(
                f"{name}: blocks (colours) of {blocks[0]}x{blocks[1]}x{blocks[2]} threads, grid "
                f"{grid[0]}x{grid[1]}x{grid[2]}; warp 0 outlined",
                fontsize=9,
            )
            left.legend(loc="upper right", fontsize=8)
        _draw_requests(right, warp_requests(mapping, km), cost, mapping.target.warp_size)
    fig.suptitle(f"mapping of {mapping.program.name} for {mapping.target.name}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    _save(fig, path)
    plt.close(fig)
    return path


def _draw_requests(ax, requests: list[WarpRequest], cost: KernelCost, warp: int) -> None:
    """One row per access, one cell per lane, coloured by the sector the lane's bytes start
    in (lanes that share a sector share a colour; a blank cell: a lane without an iteration
    there), and the count of sectors the request touches."""
    staged = {a.access for a in cost.accesses if a.from_shared}
    if not requests:
        ax.text(0.5, 0.5, "no access to global memory", ha="center", va="center")
        ax.set_axis_off()
        return
    cells = np.full((len(requests), warp), np.nan)
    for row, request in enumerate(requests):
        rank = {s: k for k, s in enumerate(sorted({a // request.sector_bytes for a in request.addresses}))}
        for lane, address in enumerate(request.addresses):
            cells[row, lane] = rank[address // request.sector_bytes] % 20
    ax.imshow(cells, cmap="tab20", vmin=0, vmax=19, aspect="auto", interpolation="nearest")
    labels = []
    for request in requests:
        access = request.text.split(" ", 1)[1]
        tag = (
            " (staged: its copy reads the tile coalesced)"
            if access in staged and not request.is_write
            else ""
        )
        plural = "s" if request.sectors != 1 else ""
        labels.append(f"{request.text}: {request.sectors} sector{plural}{tag}")
    ax.set_yticks(range(len(requests)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xticks(range(0, warp, 4))
    ax.set_xlabel(
        f"lane of the first warp (colour: the {requests[0].sector_bytes}-byte sector it reads or writes)"
    )
    ax.set_title("the first warp's first request per access", fontsize=9)


# ------------------------------------------------------------------ a roofline


@dataclass(frozen=True, slots=True)
class RooflinePoint:
    """One kernel on the roofline: flops per DRAM byte and flops per second, predicted."""

    label: str
    intensity: float
    flops_per_s: float


def roofline_points(mappings: list[tuple[str, Mapping]]) -> list[RooflinePoint]:
    """The predicted point of every kernel that computes and moves DRAM bytes."""
    points = []
    for model, mapping in mappings:
        bandwidth = mapping.target.dram_bandwidth
        for km, cost in zip(mapping.kernels, mapping.costs):
            moved = cost.memory_s * bandwidth
            if cost.flops <= 0 or moved <= 0 or cost.time_s <= 0:
                continue
            points.append(
                RooflinePoint(f"{model}/{km.kernel.name}", cost.flops / moved, cost.flops / cost.time_s)
            )
    return points


def plot_roofline(mappings: list[tuple[str, Mapping]], path: str | Path) -> Path:
    """The predicted roofline of every kernel of ``mappings`` (model name, mapping) on the
    first mapping's target: its DRAM and FP32 roofs and one point per kernel."""
    path = checked_plot_path(path)
    plt = _pyplot()
    if not mappings:
        raise ArgumentError("--plot: no model to draw")
    target = mappings[0][1].target
    points = roofline_points(mappings)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    low = min([p.intensity for p in points] + [0.05]) / 2
    high = max([p.intensity for p in points] + [200.0]) * 2
    xs = np.geomspace(low, high, 200)
    ax.loglog(xs, np.minimum(target.peak_fp32_flops, target.dram_bandwidth * xs), color="black", lw=1.2)
    ax.annotate(
        f"FP32 peak {target.peak_fp32_flops / 1e12:.1f} TFLOP/s, DRAM {target.dram_bandwidth / 1e12:.2f} TB/s",
        (high / 3, target.peak_fp32_flops),
        ha="right",
        va="bottom",
        fontsize=8,
    )
    for p in points:
        ax.scatter([p.intensity], [p.flops_per_s], s=18)
        ax.annotate(
            p.label, (p.intensity, p.flops_per_s), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_xlabel("flops per DRAM byte (the model's traffic)")
    ax.set_ylabel("flop/s (predicted)")
    ax.set_title(f"predicted roofline on {target.name}: one point per kernel", fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path
