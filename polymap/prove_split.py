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
  nest's last statement, the atomic update of the target: the same check holds of it.
"""

from __future__ import annotations

import islpy as isl

from polymap.errors import InternalError
from polymap.ir.nodes import IVar
from polymap.poly.model import PolyModel, StatementModel
from polymap.transform.split import Reduction, Split


def prove_split(before: PolyModel, after: PolyModel, reduction: Reduction, split: Split, extent: int) -> str:
    """Check the two facts of the module docstring for ``reduction`` split as ``split``
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
    init, updates = parts[0], parts[1:]
    partials = init.writes[0].buffer
    combine = [s for s in combine if any(a.buffer == partials for a in s.reads)]
    if len(updates) != len(loop) or len(combine) != 1:
        raise InternalError(f"the split of loop '{reduction.index}' does not have the loop's statements")
    for old, new in zip(loop, updates):
        _one_part_each(old, new, depth, split, extent, reduction.index)
    (combined,) = combine
    partial_reads = [a for a in combined.reads if a.buffer == partials]
    started = init.writes[0].relation.intersect_domain(init.domain)
    for update in updates:
        written = update.writes[0].relation.intersect_domain(update.domain).range()
        if not written.is_subset(started.range()):
            raise InternalError(
                f"an update of the split of '{reduction.index}' writes a partial never started"
            )
    if len(partial_reads) != 1:
        raise InternalError(
            f"the combine of the split of '{reduction.index}' reads its partials {len(partial_reads)} times"
        )
    reads = partial_reads[0].relation.intersect_domain(combined.domain)
    if not reads.is_injective() or not reads.range().is_equal(started.range()):
        raise InternalError(
            f"the combine of the split of '{reduction.index}' does not read each partial once"
        )
    how = (
        "each part's atomic update reads its partial once"
        if split.atomic
        else "the combine reads each part's partial once"
    )
    return f"isl: each iteration of loop '{reduction.index}' runs in exactly one part, and {how}"


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
