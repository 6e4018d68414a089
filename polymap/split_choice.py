"""Which reduction loops to split into parts, and how (``transform.split``): a choice made
on SCIP's costs, the way ``pipeline.choose_band_axes`` chooses a deep band's axes. The
program as written is mapped, then each candidate split of a loop of an under-filled kernel
is mapped, and the cheapest program kept; ``prove_split`` proves the rewrite taken.
"""

from __future__ import annotations

import math
from itertools import product

from polymap.errors import ArgumentError, InternalError, MappingError, ProgramError, SolverError
from polymap.ir.nodes import Assign, IConst, Loop, Program, statement_text
from polymap.ir.walk import walk_block
from polymap.mapping.result import SplitChoice
from polymap.mapping.space import Pins, kernels
from polymap.progress import step
from polymap.prove_split import prove_split
from polymap.targets import GpuTarget
from polymap.transform.split import (
    Form,
    Split,
    atomic_split_allowed,
    reduction_at,
    reduction_loop,
    reductions,
)
from polymap.transform.split_rewrite import split_reduction

MAX_LEVELS = 3  # a loop's parts, then its combine's, then theirs
FILL_WANTED = 0.9  # a kernel that fills less of the GPU may be split
# ... and so may one whose accesses with lanes apart (lane stride beyond 1) move more than
# this share of its DRAM bytes: a column sum spread over lanes reads a sector per lane
SCATTERED_WANTED = 0.5
# the fewest iterations a part runs: its store and its combine are <= 1/256 of its loads
PART_ITERATIONS = 256
# ... or this many, where parts that long leave the GPU under-filled (1/32 more stores and
# combine reads than loads at most)
SHORT_PART_ITERATIONS = 32
GAIN_WANTED = 0.01  # a split is taken where it saves 1% of its kernel's objective at least


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
    deterministic: bool = True,
):
    """Which reduction loops to split into parts (``transform.split``), and how: the
    program is mapped as written (``map_written(program, origins)``: rewritten, SCIP per
    kernel, deep bands chosen; ``origins``: per kernel, the number of the kernel as written
    it comes from, which ``kernelN.`` pins follow), then, for each reduction loop of a kernel
    that fills less than FILL_WANTED of the GPU, or whose DRAM bytes are mostly moved by
    accesses with lanes apart (``scattered_share``), or that a ``split`` pin names, the program
    split into ``parts`` parts is mapped once per form (cyclic, blocked), for each count of
    ``_part_counts`` (the powers of two that would fill the GPU with a thread, and with a
    warp, per point; a pin gives the one count); the cheapest program by SCIP's objective
    (its kernels' objectives times their launches) is kept where it saves GAIN_WANTED of the
    split kernel's own objective (a pin takes the cheapest split). The loops as written are weighed
    first, then the combines (a combine is itself a reduction), down to MAX_LEVELS. Returns
    what ``map_written`` returns for the chosen program (whose first item is that program,
    rewritten) and a SplitChoice per loop weighed, in order."""
    origins = tuple(range(len(kernels(program))))
    current = map_written(program, origins)
    warp = gpu.warp_size
    made: list[SplitChoice] = []
    # per position of the current program: how many splits made the loop there (a combine of
    # a combine: 2), and which positions were weighed already
    level: dict[int, int] = {}
    weighed: set[int] = set()
    names: set[str] = set()  # the indices of the loops weighed, for the pins' check
    while True:
        model = analyses(program, context)
        found = [
            r
            for r in reductions(program, model, reassociate=reassociate)
            if r.position not in weighed and level.get(r.position, 0) < MAX_LEVELS
        ]
        found.sort(key=lambda r: (level.get(r.position, 0), r.position))  # the loops as written first
        bound = program.bind(**sizes)
        owners = _kernel_of_position(program)
        changed = False
        for reduction in found:
            weighed.add(reduction.position)
            names.add(reduction.index)
            mapped_kernel, cost, _ = current[1][owners[reduction.position]]
            pin = pins.get(reduction.index)
            extent = _extent_at(bound, reduction)
            if pin is not None and pin > 1 and pin > extent:
                raise ArgumentError(
                    f"pin '{reduction.index}': split into {pin} parts, but loop '{reduction.index}' runs "
                    f"{extent} iterations at the cost sizes"
                )
            scattered = scattered_share(cost) > SCATTERED_WANTED
            body = reduction_loop(bound.body[reduction.position], reduction).body

            def counts_for(inner: bool) -> tuple[int, ...]:
                # a part runs its share of the loop and the loops inside it, but for the one an
                # inner split makes a par loop of the parts (whose threads it multiplies: its
                # parts may be short whatever the loop's length)
                if pin is not None:
                    return (pin,)
                work = _iteration_work(body[0].body if inner else body)
                return _part_counts(
                    cost.fill, mapped_kernel.lanes, warp, extent, scattered=scattered, work=work, short=inner
                )

            counts = counts_for(False)
            if pin is None and ((cost.fill >= FILL_WANTED and not scattered) or not counts):
                continue
            unsplit = program_objective(current[1])
            own = cost.objective_s * cost.launches  # the kernel's part of it
            options = [("unsplit", unsplit, "", None, current)]
            dtype = reduction.decl.dtype
            atomics = (
                (False, True)
                if atomic_split_allowed(reduction, dtype, deterministic=deterministic)
                else (False,)
            )
            # by the inner loop's iterations: the loops as written only (a combine's inner loop
            # is its parts, which its plain split already reads along its rows)
            as_written = level.get(reduction.position, 0) == 0
            inners = (False, True) if reduction.inner is not None and as_written else (False,)
            tried = [
                (n, form, atomic, inner)
                for inner in inners
                for n in counts_for(inner)
                for form, atomic in product((Form.CYCLIC, Form.BLOCKED), atomics)
            ]
            for parts, form, atomic, inner in tried:
                if parts < 2 or (atomic and inner):
                    continue
                how = Split(parts, form, atomic, inner)
                candidate = split_reduction(program, reduction, how, extent=extent)
                k = owners[reduction.position]
                # a combine kernel comes of kernel k too, unless the parts add atomically, and
                # the nest of an epilogue that holds a loop
                nests = 1 if atomic else 3 if reduction.fissions else 2
                moved = origins[:k] + (origins[k],) * nests + origins[k + 1 :]
                with step(f"mapping with loop '{reduction.index}' split into {how.describe(extent)}"):
                    try:
                        mapped = map_written(candidate, moved)
                    except (MappingError, SolverError, ArgumentError, ProgramError) as err:
                        options.append((how.describe(extent), None, first_line(err), how, None))
                        continue
                options.append(
                    (how.describe(extent), program_objective(mapped[1]), "", how, (candidate, mapped, moved))
                )
            splits = [k for k, o in enumerate(options) if k and o[1] is not None]
            if pin is not None and pin > 1 and not splits:
                raise MappingError(
                    f"loop '{reduction.index}' is pinned to {pin} parts, and no split into {pin} parts has a "
                    f"mapping: {'; '.join(o[2] for o in options[1:])}"
                )
            best = min(splits, key=lambda k: options[k][1], default=0)
            wanted = pin is not None or (best and options[best][1] < unsplit - GAIN_WANTED * own)
            chosen = best if wanted else 0
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
                    reduction.op.value,
                    pinned=pin is not None,
                    proof=proof,
                    online=reduction.online.group.totals if reduction.online is not None else (),
                )
            )
            if chosen:
                program, current, origins = options[chosen][4]
                q, depth = reduction.position, level.get(reduction.position, 0)
                if how.atomic:  # no combine: the parts nest takes the loop's place alone
                    level, weighed = {**level, q: MAX_LEVELS}, weighed | {q}
                else:
                    # the parts nest keeps the loop's place; the combine (and the epilogue's
                    # nest, a program's nest as any other) and what follows move on
                    more = 2 if reduction.fissions else 1
                    shifted = {p + more if p > q else p: n for p, n in level.items()}
                    level = {**shifted, q: MAX_LEVELS, q + 1: depth + 1}
                    weighed = {p + more if p > q else p for p in weighed} | {q}
                changed = True
                break  # positions moved: look for reductions again
        if not changed:
            break
    _check_split_pins(pins, program, analyses(program, context), reassociate, names)
    return current, tuple(made)


def renumbered(pins: Pins, origins: tuple[int, ...], program: Program) -> Pins:
    """``pins`` for ``program``, whose kernel ``m`` comes from kernel ``origins[m]`` as
    written: a ``kernelN.j`` pin applies to the kernels that come from kernel N (a split's
    parts and its combine) and have a loop ``j``, renamed to their numbers."""
    loops = [
        {s.index for s in walk_block(k.band[:1] or k.body) if isinstance(s, Loop)} for k in kernels(program)
    ]
    out = []
    for key, pin in pins.by_key:
        head, dot, loop = key.partition(".")
        if not dot:
            out.append((key, pin))
            continue
        number = int(head.removeprefix("kernel"))
        derived = [m for m, n in enumerate(origins) if n == number]
        having = [m for m in derived if m < len(loops) and loop in loops[m]]
        # a kernel with no such loop, or none: the first, for the pins' check to name
        out.extend((f"kernel{m}.{loop}", pin) for m in (having or derived[:1]))
        if not derived:
            out.append((key, pin))
    return Pins(tuple(out))


def _check_split_pins(pins, program, model, reassociate, weighed: set[str]) -> None:
    """Every ``split`` pin of more than 1 part names a loop that was weighed; else an
    ArgumentError says that no loop has that name, or why the loop is no reduction that may
    be split."""
    loops = {s.index: s for s in walk_block(program.body) if isinstance(s, Loop)}
    for index, parts in pins.items():
        if index in weighed or parts == 1:  # 1: never split (a combine that may not come about)
            continue
        if index not in loops:
            raise ArgumentError(f"pin '{index}': split names no loop of program '{program.name}'")
        if loops[index].is_par:
            raise ArgumentError(
                f"pin '{index}': '{index}' is a par loop; split applies to a seq reduction loop"
            )
        whys = []
        for position, stmt in enumerate(program.body):
            if any(isinstance(s, Loop) and s.index == index for s in walk_block((stmt,))):
                why = reduction_at(program, model, position, reassociate=reassociate)
                whys.append(why if isinstance(why, str) else "its kernel was not weighed")
        reason = "; ".join(whys) or "it is not a top-level loop nest's reduction loop"
        raise ArgumentError(f"pin '{index}': '{index}' is not a reduction loop that may be split: {reason}")


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
    extent = reduction_loop(bound.body[reduction.position], reduction).extent
    if not isinstance(extent, IConst):
        raise InternalError(f"loop '{reduction.index}' has no constant extent at the cost sizes: {extent}")
    return extent.value


def _iteration_work(body) -> int:
    """The instances one iteration of a loop with ``body`` runs at the cost sizes, along its
    longest nest of loops (a loop whose extent is no number counts once)."""
    most = 1
    for stmt in body:
        if isinstance(stmt, Loop):
            trips = stmt.extent.value if isinstance(stmt.extent, IConst) else 1
            most = max(most, max(trips, 1) * _iteration_work(stmt.body))
    return most


def _part_counts(
    fill: float,
    lanes: int,
    warp: int,
    extent: int,
    *,
    scattered: bool = False,
    work: int = 1,
    short: bool = False,
) -> tuple[int, ...]:
    """The numbers of parts to try: the power of two that would fill the GPU as the
    unsplit kernel is mapped (1 / fill), and the one that would fill it with the other
    choice of a thread or lanes per point (``lanes``: the unsplit kernel's, a warp or a
    block of warps; else a warp); where the unsplit kernel's lanes read ``scattered``,
    also a warp's worth of parts (the parts take the lanes' place, each reading along the
    band); each capped so that a part runs at least PART_ITERATIONS instances (``work``:
    those of one iteration, the loops inside it), and where that cap cuts it (and leaves two
    parts at least, or ``short``), also capped at SHORT_PART_ITERATIONS, never above one
    iteration per part, without repeats or counts below 2."""
    wanted = 1 << max(0, math.ceil(math.log2(1 / max(fill, 1e-12))))
    other = wanted * lanes if lanes > 1 else wanted // warp
    one_each = _most_parts(extent, 1)
    most, shortest = (
        min(one_each, _most_parts(extent * work, iterations))
        for iterations in (PART_ITERATIONS, SHORT_PART_ITERATIONS)
    )
    tried = (wanted, other, warp) if scattered else (wanted, other)
    # a count the long parts' cap cuts is tried with short parts too: a reduction of 4096
    # into 4096 outputs fills a quarter of the GPU with 16 parts of 256, all of it with 128
    # of 32. Not where the loop is too short for two long parts (a few hundred iterations:
    # the combine's own launch, which the model charges little, would be most of the gain)
    short = short or most >= 2
    counts = [c for t in tried for c in (min(t, most), *((min(t, shortest),) if short and t > most else ()))]
    return tuple(dict.fromkeys(c for c in counts if c >= 2))


def _most_parts(extent: int, iterations: int) -> int:
    """The most parts, a power of two, of at least ``iterations`` of ``extent`` each (1 if none)."""
    cap = extent // iterations
    return 1 << (cap.bit_length() - 1) if cap >= 1 else 1


def scattered_share(cost) -> float:
    """The share of a kernel's DRAM bytes that accesses whose neighbouring lanes are more
    than one element apart move (0 for a kernel that moves none), reads and writes alike:
    accesses a split could make coalesced, where parts over the band's threads take the
    place of lanes along a non-contiguous dimension (a column sum)."""
    moved = sum(a.bytes for a in cost.accesses)
    apart = sum(a.bytes for a in cost.accesses if abs(a.lane_stride) > 1)
    return apart / moved if moved else 0.0


def program_objective(solved) -> float:
    """SCIP's objective for a whole program: its kernels' objectives times their launches."""
    return sum(cost.objective_s * cost.launches for _, cost, _ in solved)


def _statement_text(reduction) -> str:
    """The loop's first update of its accumulator (an online sum's: its maximum's step) as
    written, at its line:col where it has one: not its name, which the rewrite renumbers
    (the report's tables show the program as mapped)."""
    assigns = [s for s in walk_block(reduction.loop.body) if isinstance(s, Assign)]
    update = next((s for s in assigns if s.buffer == reduction.target), assigns[0])
    return statement_text(update if reduction.online is None else assigns[0])


def first_line(error: Exception) -> str:
    """The first line of an error, for a report line."""
    return str(error).splitlines()[0]
