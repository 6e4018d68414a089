"""The forks and joins of a kernel with lanes (``mapping/lanes.py``), as isl statements.

Each spread loop at position q of the thread body has a *fork* just before it and a *join*
just after it, run by every lane of the warp of a band point (not only lane 0): at the fork
the lanes other than 0 start the loop's accumulators at the identity and take lane 0's value
of its broadcast locals; at the join the lanes' partial accumulators are combined by a
butterfly of shuffles. Both are scheduled like the statements, in the thread's time

    fork:  [s-points, q, -1, 0, ..]      before the loop's first step ([s, q, r >= 0, ..])
    join:  [s-points, q + 1, -2, 0, ..]  after its last, before whatever comes next
                                          ([s, q + 1, n >= 0 or 0, ..], or a fork at -1)

over the hardware points whose band point exists (the band's guards), with no condition on
the lane: so isl's AST puts them under no condition on threadIdx.x, and every lane of the
warp meets every shuffle (checked after the AST is built, as the barriers are). A spread
loop inside loops of the body (at ``p_0, .., p_d = q`` along its path) has its fork and join
once per iteration ``n_0 .., n_{d-1}`` of them, on every lane: ``[s-points, p_0, n_0, ..,
q, -1, 0, ..]`` and ``[.., q + 1, -2, 0, ..]``, each ``n_k`` within its loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polymap.mapping.space import SpreadLoop, body_loops
from polymap.poly.model import PolyModel
from polymap.schedule.hardware import Frame, band_constraints, param_prefix


@dataclass(frozen=True, slots=True, eq=False)
class LaneSync:
    name: str  # isl tuple name (Fork_j, Join_j)
    joins: bool  # a join (else a fork)
    spread: SpreadLoop
    relation: isl.Map  # [h, b, t, s] -> X[h, b, t, s], every lane of an existing band point
    time: isl.Map  # X[..] -> the thread's time


def lane_syncs(model: PolyModel, frame: Frame, width: int) -> tuple[LaneSync, ...]:
    """The forks and joins of a kernel (none without lanes)."""
    km = frame.mapping
    if km.lanes <= 1:
        return ()
    names = model.names
    hw_s = list(frame.hw[frame.host + 6 :])
    prefix = param_prefix(model)
    syncs = []
    for sp in km.spread:
        around = body_loops(km.kernel.body, sp.path)[:-1]
        iterators = [names.fresh(f"n_{loop.index}") for loop in around]
        launch, inside = band_constraints(model, frame, around, tuple(iterators))
        cons = launch + inside
        point = ", ".join([*frame.hw, *iterators])
        enclosing = []  # the loops around it: [p_0, n_0, .., p_{d-1}, n_{d-1}]
        for p, n in zip(sp.path, iterators):
            enclosing += [str(p), n]
        q = sp.path[-1]
        for joins in (False, True):
            name = names.fresh(f"{'Join' if joins else 'Fork'}_{sp.index}")
            relation = isl.Map(
                f"{prefix}{{ [{point}] -> {name}[{point}] : {' and '.join(cons)} }}"
            ).intersect_params(model.context)
            order = enclosing + ([str(q + 1), "-2"] if joins else [str(q), "-1"])
            clock = hw_s + order + ["0"] * (width - len(order))
            time = isl.Map(f"{prefix}{{ {name}[{point}] -> [{', '.join(clock)}] }}")
            syncs.append(LaneSync(name, joins, sp, relation, time.intersect_domain(relation.range())))
    return tuple(syncs)
