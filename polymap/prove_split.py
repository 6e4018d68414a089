"""What isl proves of a split reduction (``transform.split``): the rewrite loses and repeats
nothing.

The analysis of the split program already proves it race free and in bounds for every
size; what it cannot see is that the split program computes what the loop computed. Two
facts give that, up to the order of the updates (which the operator allows, see
``ir.accumulators``), and both are checked here with isl, for every size of the context:

* **every iteration in exactly one part**: the map from an update's instances in the parts
  nest ``[p, band, k, inner]`` to the loop's ``[band, iteration(p, k), inner]`` is
  injective, and its image is exactly the instances of the update in the program before the
  split (the guard included);
* **every part combined once**: the combine's read of the partials is injective over its
  instances, and reads exactly the partials that the parts nest starts (its initial store
  writes each one; the updates write no other). An atomic split's combine is the parts
  nest's last statement, the atomic update of the target: the same check holds of it. An
  online sum's parts store their pairs after their loop: each partial buffer's store is the
  start checked, and every read of it in the combine reads each element once.

The parts now run before the statements that preceded the loop (the combine nest runs them
after its loop over the parts), so a third fact: **the loop overwrites nothing they read**,
but the accumulator (isl's anti dependences of the program before the split,
``_prologue_first``).

Where the epilogue held a loop and became a nest of its own, a fourth fact: **that nest reads
only what the combine stored, at the band point that stored it** (``_moved_values``).
"""

from __future__ import annotations

import islpy as isl

from polymap.errors import InternalError
from polymap.ir.nodes import Assign, IVar
from polymap.ir.walk import walk_block
from polymap.poly.deps import DepKind
from polymap.poly.model import PolyModel, StatementModel
from polymap.transform.split import Reduction, Split


def prove_split(before: PolyModel, after: PolyModel, reduction: Reduction, split: Split, extent: int) -> str:
    """Check the facts of the module docstring for ``reduction`` split as ``split``
    (``extent``: the loop's extent it was chosen at, which sets a blocked chunk);
    ``before`` and ``after``: the analyses of the program before and after the split.
    Returns the proof's line for the report; raises InternalError where a fact fails (a
    fault of the rewrite, never of the user's program)."""
    position, depth = reduction.position, len(reduction.band)
    # the loop's statements (not its band's prologue and epilogue, which the combine nest
    # runs around its loop over the parts: transform.split)
    loop = [s for s in before.statements if s.ctx.position[0] == position and reduction.loop in s.loops]
    parts = [s for s in after.statements if s.ctx.position[0] == position]
    combine = [s for s in after.statements if s.ctx.position[0] == position + 1]
    if split.atomic:  # the parts nest ends with each part's atomic update of the target
        parts, combine = parts[:-1], parts[-1:]
    # the parts nest: the setup the prologue gives the loop, the partials' starts, and the
    # loop's statements (inside the part's loop, which keeps the loop's index)
    updates = [s for s in parts if any(lp.index == reduction.index for lp in s.loops)]
    added = {d.name for d in after.program.buffers} - {d.name for d in before.program.buffers}
    inits = [
        s for s in parts if s not in updates and s.writes and (split.atomic or s.writes[0].buffer in added)
    ]
    started = {init.writes[0].buffer: init.writes[0].relation.intersect_domain(init.domain) for init in inits}
    if len(updates) != len(loop) or not started:
        raise InternalError(f"the split of loop '{reduction.index}' does not have the loop's statements")
    _prologue_first(before, reduction)
    for old, new in zip(loop, updates):
        _one_part_each(old, new, depth, split, extent, reduction.index)
    for update in updates:
        for write in update.writes:
            if write.buffer in started:
                written = write.relation.intersect_domain(update.domain).range()
                if not written.is_subset(started[write.buffer].range()):
                    raise InternalError(
                        f"an update of the split of '{reduction.index}' writes a partial never started"
                    )
    for partials, start in started.items():
        reads = [(s, a) for s in combine for a in s.reads if a.buffer == partials]
        if not reads:
            raise InternalError(f"the combine of the split of '{reduction.index}' never reads {partials}")
        for combined, read in reads:
            relation = read.relation.intersect_domain(combined.domain)
            if not relation.is_injective() or not relation.range().is_equal(start.range()):
                raise InternalError(
                    f"the combine of the split of '{reduction.index}' does not read each partial once ({partials})"
                )
    facts = [f"each iteration of loop '{reduction.index}' runs in exactly one part"]
    facts.append(
        "each part's atomic update reads its partial once"
        if split.atomic
        else "the combine reads each part's partial once"
    )
    if reduction.prologue:
        facts.append("the loop overwrites nothing the statements before it read")
    if reduction.fissions:
        moved = _moved_values(after, position, added - set(started), reduction.index)
        if moved:
            facts.append(
                f"the nest after it starts each band point from the {moved} the combine stored there"
            )
    return "isl: " + ", ".join(facts[:-1]) + ", and " + facts[-1]


def _prologue_first(before: PolyModel, reduction: Reduction) -> None:
    """The parts run before the statements that preceded the loop (the combine nest runs
    them): in the program before the split, no statement of the loop overwrites what one of
    them read (isl's anti dependences), but the accumulator's element, whose updates the
    combine makes in any order."""
    prologue = {s.name for s in reduction.prologue if isinstance(s, Assign)}
    inside = {s.name for s in walk_block(reduction.loop.body) if isinstance(s, Assign)}
    targets = {reduction.target, *(reduction.online.names if reduction.online is not None else ())}
    for dep in before.dependences.of(DepKind.ANTI):
        if dep.source in prologue and dep.sink in inside and dep.buffer not in targets:
            raise InternalError(
                f"loop '{reduction.index}' overwrites {dep.buffer}, which a statement before it reads: its "
                f"parts would run first"
            )


def _moved_values(after: PolyModel, position: int, finals: set[str], index: str) -> str:
    """Check that the nest after the combine's (an epilogue with a loop, ``transform.split``)
    reads only values the combine stored, each at the band point that stored it: per buffer,
    the store's map from band points to elements is one to one, and the load's (its loops
    inside the band projected out) lies in it. Returns the values' names for the proof's
    line."""
    stores = [
        (s, a)
        for s in after.statements
        if s.ctx.position[0] == position + 1
        for a in s.writes
        if a.buffer in finals
    ]
    loads = {
        a.buffer: (s, a)
        for s in after.statements
        if s.ctx.position[0] == position + 2
        for a in s.reads
        if a.buffer in finals
    }
    if len(stores) != len(finals) or set(loads) != finals:
        raise InternalError(
            f"the nest after the combine of the split of '{index}' does not read what it stored"
        )
    for stored, store in stores:
        loaded, load = loads[store.buffer]
        band = len(stored.dims)  # the store runs at each band point, the load maybe in a loop of it
        put = store.relation.intersect_domain(stored.domain).set_tuple_name(isl.dim_type.in_, "B")
        got = load.relation.intersect_domain(loaded.domain)
        got = got.project_out(isl.dim_type.in_, band, len(loaded.dims) - band).set_tuple_name(
            isl.dim_type.in_, "B"
        )
        if not put.is_injective() or not got.is_subset(put):
            raise InternalError(
                f"the nest after the combine of the split of '{index}' does not read {store.buffer} where it was stored"
            )
    return ", ".join(sorted(finals))


def _one_part_each(
    old: StatementModel, new: StatementModel, depth: int, split: Split, extent: int, index: str
):
    """The map from ``new``'s instances (``[p, band, k, inner]``) to ``old``'s (``[band,
    iteration, inner]``) is injective and onto ``old``'s instances."""
    part, band, rest = new.dims[0], new.dims[1 : 1 + depth], new.dims[1 + depth :]
    # an inner split (``Split.inner``): the inner loop's index is a par loop of the parts,
    # around the part's loop; in the program before, it is inside the loop
    by_inner, (k, *inner) = (rest[:1], rest[1:]) if split.inner else ([], rest)
    iteration = str(split.iteration(IVar(part), IVar(k), extent))
    params = new.domain.get_space().get_var_names(isl.dim_type.param)
    source = ", ".join(new.dims)
    target = ", ".join([*band, iteration, *by_inner, *inner])
    text = f"[{', '.join(params)}] -> {{ P[{source}] -> L[{target}] }}"
    moved = isl.Map(text).intersect_domain(new.domain.set_tuple_name("P"))
    loop = old.domain.set_tuple_name("L")
    if not moved.is_injective() or not moved.range().is_equal(loop):
        raise InternalError(
            f"the split of loop '{index}' does not run each iteration of {old.name} exactly once: "
            f"{moved.range()} against {loop}"
        )
