"""Which reduction loops to split into parts, and how (``transform.split``): a choice made
on SCIP's costs, the way ``pipeline.choose_band_axes`` chooses a deep band's axes. The
program as written is mapped, then each candidate split of a loop of an under-filled kernel
is mapped, and the cheapest program kept; ``prove_split`` proves the rewrite taken.
"""

from __future__ import annotations

import math
from itertools import product

from polymap.errors import ArgumentError, InternalError, MappingError, SolverError
from polymap.ir.nodes import Assign, IConst, Loop, Program
from polymap.ir.walk import walk_block
from polymap.mapping.result import SplitChoice
from polymap.mapping.space import kernels
from polymap.progress import step
from polymap.prove_split import prove_split
from polymap.targets import GpuTarget
from polymap.transform.split import Form, Split, reduction_at, reductions, split_reduction

MAX_SPLITS = 3  # splits per program: a full sum's parts, then its combine's, then theirs
FILL_WANTED = 0.9  # a kernel that fills less of the GPU may be split
PART_ITERATIONS = (
    256  # the fewest iterations a part runs: its store and its combine are <= 1/256 of its loads
)


def choose_splits(
    program: Program,
    map_written,
    pins: dict[str, int],
    *,
    gpu: GpuTarget,
    sizes,
    reassociate,
    analyses,
    context,
):
    """Which reduction loops to split into parts (``transform.split``), and how: the
    program is mapped as written (``map_written``: rewritten, SCIP per kernel, deep bands
    chosen), then, for each reduction loop of a kernel that fills less than FILL_WANTED of
    the GPU (or that a ``split`` pin names), the program split into ``parts`` parts is
    mapped once per form (cyclic, blocked), for each count of ``_part_counts`` (the powers
    of two that would fill the GPU with a thread, and with a warp, per point; a pin gives
    the one count); the cheapest program by SCIP's objective (its kernels' objectives times
    their launches) is kept. A split's combine kernel is itself a reduction and may be
    split in the next round, up to MAX_SPLITS. Returns what ``map_written`` returns for the
    chosen program (whose first item is that program, rewritten) and a SplitChoice per loop
    considered, in order."""
    current = map_written(program)
    warp = gpu.warp_size
    made: list[SplitChoice] = []
    considered: set[int] = set()  # positions of the loops already weighed (in the current program)
    names: set[str] = set()  # their indices, for the pins' check
    while len([c for c in made if c.split is not None]) < MAX_SPLITS:
        model = analyses(program, context)
        found = reductions(program, model, reassociate=reassociate)
        _check_split_pins(pins, program, model, reassociate, {r.index for r in found} | names)
        bound = program.bind(**sizes)
        owners = _kernel_of_position(program)
        changed = False
        for reduction in found:
            if reduction.position in considered:
                continue
            considered.add(reduction.position)
            names.add(reduction.index)
            mapped_kernel, cost, _ = current[1][owners[reduction.position]]
            pin = pins.get(reduction.index)
            extent = _extent_at(bound, reduction)
            counts = (pin,) if pin is not None else _part_counts(cost.fill, mapped_kernel.lanes, warp, extent)
            if pin is None and (cost.fill >= FILL_WANTED or not counts):
                continue
            options = [("unsplit", _objective(current[1]), "", None, current)]
            for parts, form in product(counts, (Form.CYCLIC, Form.BLOCKED)):
                if parts < 2:
                    continue
                how = Split(parts, form)
                candidate = split_reduction(program, reduction, how, extent=extent)
                with step(f"mapping with loop '{reduction.index}' split into {how.describe()}"):
                    try:
                        mapped = map_written(candidate)
                    except (MappingError, SolverError, ArgumentError) as err:
                        options.append((how.describe(), None, first_line(err), how, None))
                        continue
                options.append((how.describe(), _objective(mapped[1]), "", how, (candidate, mapped)))
            allowed = [
                k
                for k, o in enumerate(options)
                if o[1] is not None and (pin is None or o[3] is not None or pin == 1)
            ]
            if not allowed:
                raise MappingError(
                    f"loop '{reduction.index}' is pinned to {pin} parts, and no split into {pin} parts has a "
                    f"mapping: {'; '.join(o[2] for o in options[1:])}"
                )
            chosen = min(allowed, key=lambda k: options[k][1])
            how = options[chosen][3]
            proof = ""
            if how is not None:
                with step(f"proof of the split of loop '{reduction.index}'"):
                    after = options[chosen][4][0]
                    proof = prove_split(model, analyses(after, context), reduction, how, extent)
            made.append(
                SplitChoice(
                    reduction.index,
                    _statement_text(reduction),
                    reduction.target,
                    tuple((what, objective, why) for what, objective, why, _, _ in options),
                    chosen,
                    reduction.position,
                    how,
                    extent,
                    reduction.reorders,
                    pinned=pin is not None,
                    proof=proof,
                )
            )
            if chosen:
                program, current = options[chosen][4]
                # the parts nest keeps the loop's place; the combine and what follows move on
                considered = {q + 1 if q > reduction.position else q for q in considered}
                changed = True
                break  # positions moved: look for reductions again
        if not changed:
            break
    return current, tuple(made)


def _check_split_pins(pins, program, model, reassociate, reducible: set[str]) -> None:
    """A ``split`` pin names a loop that is a reduction here (else an ArgumentError says why
    it is not), unless it pins 1 part or its loop was split already."""
    for index, parts in pins.items():
        if index in reducible or parts == 1:
            continue
        whys = []
        for position, stmt in enumerate(program.body):
            if any(isinstance(s, Loop) and s.index == index for s in walk_block((stmt,))):
                why = reduction_at(program, model, position, reassociate=reassociate)
                whys.append(why if isinstance(why, str) else "")
        reason = "; ".join(w for w in whys if w) or "no top-level loop nest has a seq loop of that name"
        raise ArgumentError(
            f"pin '{index}': split applies to a reduction loop that may be split, and '{index}' is not: {reason}"
        )


def _kernel_of_position(program: Program) -> dict[int, int]:
    """The number of the kernel each top-level statement starts (``space.kernels``)."""
    starts = {}
    for number, kernel in enumerate(kernels(program)):
        first = kernel.band[0] if kernel.band else kernel.body[0]
        for position, stmt in enumerate(program.body):
            if stmt is first:
                starts[position] = number
    return starts


def _extent_at(bound: Program, reduction) -> int:
    """The reduction loop's extent in the program with the cost sizes bound."""
    node = bound.body[reduction.position]
    for _ in reduction.band:
        node = node.body[0]
    extent = node.extent
    if not isinstance(extent, IConst):
        raise InternalError(f"loop '{reduction.index}' has no constant extent at the cost sizes: {extent}")
    return extent.value


def _part_counts(fill: float, lanes: int, warp: int, extent: int) -> tuple[int, ...]:
    """The numbers of parts to try: the power of two that would fill the GPU as the
    unsplit kernel is mapped (1 / fill), and the one that would fill it with the other
    choice of a thread or a warp per point (``lanes``: the unsplit kernel's); each capped
    so that a part runs at least PART_ITERATIONS iterations, without repeats or counts
    below 2."""
    wanted = 1 << max(0, math.ceil(math.log2(1 / max(fill, 1e-12))))
    other = wanted * warp if lanes > 1 else wanted // warp
    cap = extent // PART_ITERATIONS
    most = 1 << (cap.bit_length() - 1) if cap >= 1 else 1
    return tuple(dict.fromkeys(c for c in (min(wanted, most), min(other, most)) if c >= 2))


def _objective(solved) -> float:
    return sum(cost.objective_s * cost.launches for _, cost, _ in solved)


def _statement_text(reduction) -> str:
    first = next(s for s in walk_block(reduction.loop.body) if isinstance(s, Assign))
    return f"{first.name} `{first}`"


def first_line(error: Exception) -> str:
    """The first line of an error, for a report line."""
    return str(error).splitlines()[0]
