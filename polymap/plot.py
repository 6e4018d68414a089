"""Pictures of a mapping and of the predicted roofline (``polymap map --plot``, ``polymap
bench --plot``), drawn with matplotlib (the optional ``plot`` extra), as PNG, SVG or PDF by
the file's suffix.

A mapping's picture has one row per kernel:

* **who runs what**: the iterations of the band's loops on the thread axes x (across) and y
  (down), over the first two blocks along each (at most ``MAX_CELLS``), coloured by block,
  blank outside the loops' extents (a triangle); the cells of the first warp of the first
  block are outlined and those of its first thread marked, so the distribution (blocked,
  cyclic or grouped) and the thread's points show;
* **where a warp's first request goes**: for every access of every statement of the
  kernel's body to global memory, the 32-byte sector each lane of that warp touches at its
  first point, at the first iteration of the loops around the statement where some lane runs
  it (its ``if`` may leave the very first out); lanes of one colour share a sector, and the
  label counts them. The model counts a request's sectors as if its lowest byte began one;
  where it does not (a shifted read), the label says both.

Both are computed from the program's index expressions and the mapping's formulas
``i = g*T*S + s*T + t`` (cyclic), ``g*T*S + t*S + s`` (blocked) or
``g*T*S + (s div V)*T*V + t*V + s mod V`` (grouped; ``LoopMapping.iteration``) at the sizes the cost was
estimated at, not from the cost model: the picture is a check on the model's sector counts,
which the report prints next to each access.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polymap.errors import ArgumentError
from polymap.ir.nodes import Anchor, Assign, Compare, Gather, IndexExpr, LogicOp, Loop, Not, Read, reads_of
from polymap.mapping.result import KernelCost, Mapping
from polymap.mapping.space import KernelMapping, LoopMapping, body_loops
from polymap.poly.isl_text import evaluate_index

FORMATS = (".png", ".svg", ".pdf")
MAX_CELLS = 256  # iterations drawn along an axis at most (two blocks where they fit)


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
    """``path`` where a picture can be written: a known suffix, not a directory, in a
    directory where a file can be opened for writing (tried here, before any solve; a file
    that did not exist is removed again)."""
    text = str(path)
    path = Path(path)
    if not text or path.suffix.lower() not in FORMATS:
        raise ArgumentError(
            f"--plot {text!r}: the file must end in {', '.join(FORMATS)} (the picture's format)"
        )
    if path.is_dir():
        raise ArgumentError(f"--plot {path}: is a directory; name a file in it")
    if not path.parent.is_dir():
        raise ArgumentError(f"--plot {path}: the directory {path.parent} does not exist")
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as err:
        raise ArgumentError(f"--plot {path}: cannot write there: {err.strerror or err}") from None
    if not existed:
        path.unlink(missing_ok=True)
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
    span, v = loop.threads * loop.seq, loop.step
    block, rest = divmod(index, span)
    group, rest = divmod(rest, loop.threads * v)
    thread, within = divmod(rest, v)
    return Point(block, thread, group * v + within)


def place(loop: LoopMapping, block: int, thread: int, point: int) -> int:
    """The loop's formula: the iteration that ``block``, ``thread`` and ``point`` run."""
    return loop.iteration(block, thread, point)


@dataclass(frozen=True, slots=True)
class WarpRequest:
    """The byte addresses of one access of statement ``statement`` by the lanes of the first
    warp at their first point."""

    statement: str
    text: str
    is_write: bool
    addresses: tuple[int | None, ...]  # per lane: None where the lane has no instance there
    sector_bytes: int  # the unit a request moves (``GpuTarget.sector_bytes``)
    at: tuple[tuple[str, int], ...] = ()  # the iteration of the loops around it in the body

    @property
    def touched(self) -> list[int]:
        return [a for a in self.addresses if a is not None]

    @property
    def sectors(self) -> int:
        """The sectors the request touches, at its true addresses."""
        return len({a // self.sector_bytes for a in self.touched})

    @property
    def aligned_sectors(self) -> int:
        """The sectors it would touch if its lowest address began a sector: what the cost
        model counts (it does not know where a buffer's rows start within a sector)."""
        if not self.touched:
            return 0
        low = min(self.touched)
        return len({(a - low) // self.sector_bytes for a in self.touched})


def warp_requests(mapping: Mapping, km: KernelMapping) -> list[WarpRequest]:
    """Every access of the kernel's body to a program-wide buffer, per statement (an update
    such as ``+=`` reads its target first), as the lanes of the first warp of block 0 issue
    it at s-point 0 and host loops at 0, at the first iteration of the loops around it in the
    body where some lane runs it (of their first ``SEARCHED`` each; ``WarpRequest.at``). A
    lane whose iteration is outside the band, or where the statement's ``if`` does not hold,
    has no address (None)."""
    program = mapping.program
    sizes = dict(program.bindings) | dict(mapping.cost_sizes)
    block = km.block_dim()
    lanes: list[dict | None] = []
    lane_of: list[int] = []  # with lanes (``mapping/lanes.py``), threadIdx.x
    for lane in range(min(mapping.target.warp_size, math.prod(block))):
        t = (lane % block[0], lane // block[0] % block[1], lane // (block[0] * block[1]))
        env = dict(sizes) | {loop.index: 0 for loop in km.kernel.host_loops}
        inside = True
        for lm in km.loops:
            env[lm.index] = place(lm, 0, t[lm.thread_axis.position], 0)
            inside = inside and env[lm.index] < evaluate_index(lm.extent, env)
        lanes.append(env if inside else None)
        lane_of.append(t[0])
    # a spread loop runs its iteration n on lane n % lanes; the rest of the body on lane 0
    spread = [body_loops(km.kernel.body, sp.path)[-1] for sp in km.spread] if km.lanes > 1 else []
    globals_ = {d.name: d for d in program.buffers}
    requests = []
    for stmt, around in _statements(km.kernel.body, ()):
        depth = next((k for k, loop in enumerate(around) if any(loop is x for x in spread)), None)
        on_lanes = depth is not None
        runs = _first_run(stmt, around, lanes, (km.lanes, lane_of, depth) if on_lanes else None)
        if km.lanes > 1 and not on_lanes:
            runs = [env if lane == 0 else None for env, lane in zip(runs, lane_of)]
        touched = [(r.buffer, r.indices, False) for r in reads_of(stmt.value)]
        if isinstance(stmt, Assign):
            if stmt.op.is_update:
                touched.insert(0, (stmt.buffer, stmt.indices, False))
            touched.append((stmt.buffer, stmt.indices, True))
        seen = set()
        for buffer, indices, is_write in touched:
            if buffer not in globals_ or (buffer, indices, is_write) in seen:
                continue
            if globals_[buffer].by_value:
                continue  # an in scalar is a kernel parameter: no memory access to draw
            if any(isinstance(e, Gather) for e in indices):
                continue  # a gathered read's row is data, known only at run time: not drawn
            seen.add((buffer, indices, is_write))
            decl = globals_[buffer]
            addresses = tuple(
                None if env is None else _offset(indices, decl.shape, env) * decl.dtype.itemsize
                for env in runs
            )
            at = tuple((loop.index, runs_at) for loop, runs_at in zip(around, _values(runs, around)))
            text = f"{'write' if is_write else 'read'} {Read(buffer, indices)}"
            requests.append(
                WarpRequest(stmt.name, text, is_write, addresses, mapping.target.sector_bytes, at)
            )
    return requests


SEARCHED = 4  # iterations of each loop around a statement tried for one that some lane runs


def _statements(body, around: tuple[Loop, ...]):
    """The statements of a kernel's body with the loops around each, inside the body."""
    for stmt in body:
        if isinstance(stmt, Loop):
            yield from _statements(stmt.body, around + (stmt,))
        elif isinstance(stmt, (Assign, Anchor)):
            yield stmt, around


def _first_run(
    stmt,
    around: tuple[Loop, ...],
    lanes: list[dict | None],
    spread: tuple[int, list[int], int] | None = None,
) -> list[dict | None]:
    """Per lane, its instance of ``stmt`` at the first iteration of the loops ``around`` (the
    first ``SEARCHED`` of each, in order) where some lane runs it; all None if none does.
    ``spread``: a loop of ``around`` runs on the lanes, ``(count, lane of each, its place in
    around)``: its n-th step is iteration ``count * n + lane``."""
    for values in itertools.product(range(SEARCHED), repeat=len(around)):
        runs = []
        for k, env in enumerate(lanes):
            here = None if env is None else env | {loop.index: v for loop, v in zip(around, values)}
            if here is not None and spread is not None:
                count, lane_of, depth = spread
                here[around[depth].index] = count * values[depth] + lane_of[k]
            if here is not None and not all(
                here[loop.index] < evaluate_index(loop.extent, here) for loop in around
            ):
                here = None
            if here is not None and stmt.guard is not None and not _holds(stmt.guard, here):
                here = None
            runs.append(here)
        if any(env is not None for env in runs):
            return runs
    return [None] * len(lanes)


def _values(runs: list[dict | None], around: tuple[Loop, ...]) -> list[int]:
    env = next((e for e in runs if e is not None), None)
    return [0 if env is None else env[loop.index] for loop in around]


def _holds(cond, env: dict) -> bool:
    """An ``if``'s condition (comparisons of index expressions) at one instance."""
    if isinstance(cond, Not):
        return not _holds(cond.operand, env)
    if isinstance(cond, Compare):
        return bool(cond.op.holds(evaluate_index(cond.lhs.expr, env), evaluate_index(cond.rhs.expr, env)))
    first = _holds(cond.lhs, env)
    if cond.op is LogicOp.AND:
        return first and _holds(cond.rhs, env)
    return first or _holds(cond.rhs, env)


def _offset(indices: tuple[IndexExpr, ...], shape: tuple[IndexExpr, ...], env: dict) -> int:
    """The row-major element offset of an access."""
    offset = 0
    for index, extent in zip(indices, shape):
        offset = offset * evaluate_index(extent, env) + evaluate_index(index, env)
    return offset


@dataclass(frozen=True, slots=True)
class Grid:
    """The cells of the left panel, (y, x): ``block`` the block's number (-1 outside the
    loops' extents), whether the first warp of block 0 runs it and whether its first thread
    does; the loops on x and y (None: no loop there) and whether the drawing stops before
    two blocks along either."""

    block: np.ndarray
    warp: np.ndarray
    first: np.ndarray
    across: LoopMapping | None
    down: LoopMapping | None
    cut: bool


def _grid(km: KernelMapping, sizes: dict, warp_size: int) -> Grid:
    """The iterations of the loops on the thread axes x and y over the first two blocks
    along each (at most ``MAX_CELLS``), up to each loop's largest extent; a cell outside the
    extents there (a triangle's) is -1. A loop off x and y (z) is held at its first
    iteration."""
    by_axis = {lm.thread_axis.value: lm for lm in km.loops}
    across, down = by_axis.get("x"), by_axis.get("y")

    def cells(lm: LoopMapping | None) -> tuple[int, bool]:
        if lm is None:
            return 1, False
        want = min(2 * lm.threads * lm.seq, lm.max_extent)
        return max(1, min(MAX_CELLS, want)), want > MAX_CELLS

    (width, cut_x), (height, cut_y) = cells(across), cells(down)
    block = np.full((height, width), -1, int)
    warp = np.zeros((height, width), bool)
    first = np.zeros((height, width), bool)
    tx = km.block_dim()[0]
    for y in range(height):
        for x in range(width):
            env = (
                dict(sizes)
                | {lm.index: 0 for lm in km.loops}
                | {loop.index: 0 for loop in km.kernel.host_loops}
            )
            if across is not None:
                env[across.index] = x
            if down is not None:
                env[down.index] = y
            if not all(env[lm.index] < evaluate_index(lm.extent, env) for lm in km.loops):
                continue
            gx, t_x = _at(across, x)
            gy, t_y = _at(down, y)
            block[y, x] = gy * 2 + gx
            lane = t_x + tx * t_y
            warp[y, x] = gx == 0 and gy == 0 and lane < warp_size
            first[y, x] = gx == 0 and gy == 0 and lane == 0
    return Grid(block, warp, first, across, down, cut_x or cut_y)


def _at(lm: LoopMapping | None, index: int) -> tuple[int, int]:
    if lm is None:
        return 0, 0
    p = locate(lm, index)
    return p.block, p.thread


def _colours(plt, count: int):
    """``count`` distinct colours (up to 40: a warp's request touches at most 32 sectors)."""
    from matplotlib.colors import ListedColormap

    palette = list(plt.get_cmap("tab20").colors) + list(plt.get_cmap("tab20b").colors)
    return ListedColormap(palette[:count])


def plot_mapping(mapping: Mapping, path: str | Path) -> Path:
    """Draw ``mapping`` (see the module docstring) into ``path``; returns it."""
    path = checked_plot_path(path)
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    kernels = list(mapping.kernels)
    fig, axes = plt.subplots(
        len(kernels),
        2,
        figsize=(13, 3.8 * len(kernels)),
        squeeze=False,
        gridspec_kw={"width_ratios": [1, 1.3]},
    )
    sizes = dict(mapping.program.bindings) | dict(mapping.cost_sizes)
    warp_size = mapping.target.warp_size
    for row, (km, cost) in enumerate(zip(kernels, mapping.costs)):
        left, right = axes[row]
        name = km.kernel.name
        if km.kernel.is_serial:
            left.text(0.5, 0.5, f"{name}: a serial kernel (one thread)", ha="center", va="center")
            left.set_axis_off()
        else:
            grid = _grid(km, sizes, warp_size)
            shown = np.ma.masked_less(grid.block, 0)  # outside the extents: blank
            left.imshow(shown, cmap="Pastel1", vmin=0, vmax=8, aspect="auto", interpolation="nearest")
            if grid.warp.any():
                # a border of empty cells closes the outline at the edges (and gives a
                # one-row band the two rows contour needs)
                height, width = grid.warp.shape
                padded = np.pad(grid.warp.astype(float), 1)
                xs, ys = np.arange(-1, width + 1), np.arange(-1, height + 1)
                left.contour(xs, ys, padded, levels=[0.5], colors="black", linewidths=1.0)
                left.set_xlim(-0.5, width - 0.5)
                left.set_ylim(height - 0.5, -0.5)
            ys, xs = np.nonzero(grid.first)
            left.scatter(xs, ys, s=10, c="crimson", label="thread 0's points")
            left.xaxis.set_major_locator(MaxNLocator(integer=True))
            left.yaxis.set_major_locator(MaxNLocator(integer=True))
            if km.lanes > 1:
                left.set_xlabel(f"(threadIdx.x: the {km.lanes} lanes of each point)")
            else:
                left.set_xlabel(f"{grid.across.index} (threads on x)" if grid.across else "(no loop on x)")
            if grid.down is None:
                left.set_yticks([])
                left.set_ylabel("(no loop on y)")
            else:
                left.set_ylabel(f"{grid.down.index} (threads on y)")
            dims, g = km.block_dim(), km.grid_dim()
            note = f"; the first {MAX_CELLS} iterations along an axis" if grid.cut else ""
            left.set_title(
                f"{name}: blocks of {dims[0]}x{dims[1]}x{dims[2]} threads (colours), grid "
                f"{g[0]}x{g[1]}x{g[2]}; warp 0 outlined{note}",
                fontsize=8,
            )
            left.legend(loc="upper right", fontsize=7)
        _draw_requests(plt, right, warp_requests(mapping, km), cost, warp_size)
    fig.suptitle(f"mapping of {mapping.program.name} for {mapping.target.name}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    _save(fig, path)
    plt.close(fig)
    return path


def _draw_requests(plt, ax, requests: list[WarpRequest], cost: KernelCost, warp: int) -> None:
    """One row per access, one cell per lane, coloured by the sector the lane touches (lanes
    of one colour share a sector; blank: the lane has no instance there), labelled with the
    statement, the access and its count of sectors."""
    staged = {a.access for a in cost.accesses if a.from_shared}
    if not requests:
        ax.text(0.5, 0.5, "no access to global memory", ha="center", va="center")
        ax.set_axis_off()
        return
    cells = np.full((len(requests), warp), np.nan)
    for row, request in enumerate(requests):
        rank = {s: k for k, s in enumerate(sorted({a // request.sector_bytes for a in request.touched}))}
        for lane, address in enumerate(request.addresses):
            if address is not None:
                cells[row, lane] = rank[address // request.sector_bytes]
    ax.imshow(cells, cmap=_colours(plt, 40), vmin=-0.5, vmax=39.5, aspect="auto", interpolation="nearest")
    for row in range(len(requests) - 1):
        ax.axhline(row + 0.5, color="white", lw=3)
    labels = []
    for request in requests:
        access = request.text.split(" ", 1)[1]
        if not request.touched:
            count = "no lane runs it in the first iterations"
        else:
            count = f"{request.sectors} sector{'s' if request.sectors != 1 else ''}"
            if request.aligned_sectors != request.sectors:
                count += f" ({request.aligned_sectors} if aligned, as the model counts)"
        tag = ", staged" if access in staged and not request.is_write else ""
        where = ", ".join(f"{name}={value}" for name, value in request.at if value)
        where = f" at {where}" if where else ""
        labels.append(f"{request.statement} {request.text}{where}: {count}{tag}")
    ax.set_yticks(range(len(requests)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xticks(range(0, warp, 4))
    ax.set_xlabel(f"lane (colour: the {requests[0].sector_bytes}-byte sector it touches)", fontsize=8)
    ax.set_title(
        "the first warp's first request of each access (staged: read from shared memory, its "
        "copy moves the tile)",
        fontsize=8,
    )


# ------------------------------------------------------------------ a roofline


@dataclass(frozen=True, slots=True)
class RooflinePoint:
    """One kernel on the roofline: flops per DRAM byte and flops per second, predicted;
    ``cache_intensity``: flops per byte of all its traffic, which the caches move (the
    caches' roof of ``cost_model``), None for a target without a caches' figure."""

    label: str
    intensity: float
    flops_per_s: float
    cache_intensity: float | None = None


def roofline_points(mappings: list[tuple[str, Mapping]]) -> list[RooflinePoint]:
    """The predicted point of every kernel that computes and moves DRAM bytes."""
    points = []
    for model, mapping in mappings:
        bandwidth, caches = mapping.target.dram_bandwidth, mapping.target.cache_bandwidth
        for km, cost in zip(mapping.kernels, mapping.costs):
            moved = cost.memory_s * bandwidth
            if cost.flops <= 0 or moved <= 0 or cost.time_s <= 0:
                continue
            through = cost.cache_s * caches if caches else 0.0
            points.append(
                RooflinePoint(
                    f"{model}/{km.kernel.name}",
                    cost.flops / moved,
                    cost.flops / cost.time_s,
                    cost.flops / through if through > 0 else None,
                )
            )
    return points


def plot_roofline(mappings: list[tuple[str, Mapping]], path: str | Path) -> Path:
    """The predicted roofline of every kernel of ``mappings`` (model name, mapping) on the
    first mapping's target: its DRAM, caches' and FP32 roofs, and per kernel a point at its
    flops per DRAM byte (filled) and one at its flops per byte of all its traffic (hollow,
    under the caches' roof), joined: a hierarchical roofline, one row of points per level."""
    path = checked_plot_path(path)
    plt = _pyplot()
    if not mappings:
        raise ArgumentError("--plot: no model to draw")
    target = mappings[0][1].target
    points = roofline_points(mappings)
    through = [p.cache_intensity for p in points if p.cache_intensity is not None]
    fig, ax = _roofs(plt, target, [p.intensity for p in points] + through, caches=bool(through))
    for k, p in enumerate(points):
        if p.cache_intensity is not None:
            color = f"C{k % 10}"
            ax.plot([p.cache_intensity, p.intensity], [p.flops_per_s] * 2, color=color, lw=0.6, alpha=0.6)
            ax.scatter([p.cache_intensity], [p.flops_per_s], s=18, facecolors="none", edgecolors=color)
    # kernels at the same point (a host loop's kernels, say) share one label
    groups: dict[tuple[float, float], list[str]] = {}
    for p in points:
        groups.setdefault(
            (round(math.log10(p.intensity), 3), round(math.log10(p.flops_per_s), 3)), []
        ).append(p.label)
    placed: list[tuple[float, float]] = []  # labels drawn, in decades: a near one goes below
    for labels in groups.values():
        k, first = next((k, p) for k, p in enumerate(points) if p.label == labels[0])
        ax.scatter([first.intensity], [first.flops_per_s], s=18, color=f"C{k % 10}")
        at = (math.log10(first.intensity), math.log10(first.flops_per_s))
        near = sum(abs(x - at[0]) < 0.6 and abs(y - at[1]) < 0.08 for x, y in placed)
        placed.append(at)
        _label(ax, ", ".join(labels), first.intensity, first.flops_per_s, below=near)
    ax.set_ylabel("flop/s (predicted)")
    if through:
        ax.set_xlabel("flops per byte: per DRAM byte (filled), per byte through the caches (hollow)")
    ax.set_title(f"predicted roofline on {target.name}: one point per kernel and memory level", fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


@dataclass(frozen=True, slots=True)
class CasePoint:
    """One case of ``polymap bench --kernels`` on the roofline: flops per DRAM byte of the
    model's traffic, and flop/s as predicted and as measured (``None`` where no GPU ran it).
    The measured point keeps the model's bytes: the bench times, it does not count bytes."""

    label: str
    intensity: float
    predicted: float
    measured: float | None


def case_points(results) -> list[CasePoint]:
    """The point of every case (``bench_kernels.Result``) that computes and moves bytes."""
    points = []
    for r in results:
        if r.flops <= 0 or r.model_dram_bytes <= 0 or r.predicted_s <= 0:
            continue
        measured = r.flops / r.median_s if r.median_s else None
        points.append(CasePoint(r.case, r.flops / r.model_dram_bytes, r.flops / r.predicted_s, measured))
    return points


def plot_bench_roofline(results, target, device: str, path: str | Path) -> Path:
    """The roofline of ``polymap bench --kernels``: per case, the predicted point (hollow)
    and, where the GPU ran it, the measured one (filled), joined by a line."""
    path = checked_plot_path(path)
    plt = _pyplot()
    points = case_points(results)
    if not points:
        raise ArgumentError("--plot: no case computes and moves DRAM bytes: nothing to draw")
    fig, ax = _roofs(plt, target, [p.intensity for p in points])
    measured = [p for p in points if p.measured is not None]
    for k, p in enumerate(points):
        color = f"C{k % 10}"
        ax.scatter([p.intensity], [p.predicted], s=30, facecolors="none", edgecolors=color)
        top = p.predicted
        if p.measured is not None:
            ax.plot([p.intensity, p.intensity], [p.predicted, p.measured], color=color, lw=0.8)
            ax.scatter([p.intensity], [p.measured], s=30, color=color)
            top = max(top, p.measured)
        _label(ax, p.label, p.intensity, top)
    ax.set_ylabel("flop/s")
    ran = f"measured on {device} (filled)" if measured else "no GPU ran: predicted only"
    ax.set_title(f"roofline on {target.name}: predicted (hollow), {ran}", fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def _roofs(plt, target, intensities: list[float], *, caches: bool = False):
    """A figure with ``target``'s DRAM and FP32 roofs over the intensities to draw (with
    ``caches``, the caches' roof too, dashed)."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    low = min([*intensities, 0.05]) / 2
    high = max([*intensities, 200.0]) * 2
    xs = np.geomspace(low, high, 200)
    ax.loglog(xs, np.minimum(target.peak_fp32_flops, target.dram_bandwidth * xs), color="black", lw=1.2)
    roofs = f"roofs: FP32 peak {target.peak_fp32_flops / 1e12:.1f} TFLOP/s, DRAM {target.dram_bandwidth / 1e12:.2f} TB/s"
    if caches:
        bandwidth = target.cache_bandwidth
        ax.loglog(xs, np.minimum(target.peak_fp32_flops, bandwidth * xs), color="grey", lw=1.0, ls="--")
        roofs += f", caches {bandwidth / 1e12:.1f} TB/s (dashed)"
    ax.text(
        0.98,
        0.02,
        roofs,
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        fontsize=8,
    )
    ax.set_xlabel("flops per DRAM byte (the model's traffic)")
    return fig, ax


def _label(ax, text: str, x: float, y: float, *, below: int = 0) -> None:
    """``text`` beside the point (x, y); ``below``: labels near it already, so this one goes
    that many lines under it."""
    ax.annotate(text, (x, y), fontsize=7, xytext=(3, 3 - 10 * below), textcoords="offset points")


# ----------------------------------------------------------------- a plan's frontier


def plot_frontier(frontier, path: str | Path) -> Path:
    """Orojenesis' picture: on-chip capacity against off-chip bytes, one staircase per
    strategy (:class:`polymap.plan.frontier.Frontier`), log-log."""
    path = checked_plot_path(path)
    plt = _pyplot()
    from polymap.plan.frontier import STRATEGIES

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"unfused": ("black", "o"), "untiled": ("tab:blue", "s"), "tiled": ("tab:red", "^")}
    for strategy in STRATEGIES:
        xs, ys = [], []
        for capacity in frontier.capacities:
            point = frontier.point(strategy, capacity)
            if point.bytes is not None:
                xs.append(capacity)
                ys.append(point.bytes)
        if xs:
            colour, marker = styles[strategy]
            ax.step(xs, ys, where="post", color=colour, lw=1.2)
            ax.scatter(
                xs,
                ys,
                color=colour,
                marker=marker,
                s=22,
                label=f"{strategy} fusion" if strategy != "unfused" else "unfused",
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"on-chip capacity ({frontier.unit})")
    ax.set_ylabel("off-chip traffic (bytes)")
    ax.set_title(f"{frontier.program}: fewest off-chip bytes per capacity (SCIP optimal)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path
