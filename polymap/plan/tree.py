"""A plan for a chain of einsums: the tiled and fused loop tree, and what it costs.

The machine has two levels of memory: off chip (DRAM), and an on-chip store of
``capacity`` elements (or bytes). A plan says, for the whole chain at once:

- **Segments.** Consecutive einsums that share a *band* of fused loops, outermost: one
  loop per fused rank (a dim every einsum of the segment writes, lined up through the
  links), each with a factor (its trip count). Every einsum of the segment runs inside
  the band, one after the other, on one tile of the band at a time.
- **Nests.** Under the band, each einsum has its own loop nest: each of its dims split
  into factors, one per *bucket*, and between the buckets the *blocking levels* of its
  tensors: where the tensor's tile is brought on chip (seed 000's buckets).
- **Links.** Each intermediate is written back (``dram``), kept one band tile at a time
  (``tiled``: producer and consumer are in the same segment), or kept whole on chip
  (``whole``: untiled fusion).
- **Held tensors.** An input may be *held* for its segment: loaded once, whole, above the
  band (Orojenesis' additive working set, e.g. a weight reused by every band tile).

Costs follow Timeloop's counting (seed 000): a tensor at a blocking level is loaded once
per iteration of every loop outside its level (the band included), and its tile is the
product of the factors of its own dims inside the level. An einsum's output never leaves
chip with a partial sum (its reduction loops stay inside its level), so it is written
exactly once. What is on chip while an einsum runs is its tensors' tiles, everything held
by its segment, and every whole intermediate alive across it: that sum must fit.

:func:`account` computes these numbers exactly, in integers, from the tree alone.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from polymap.plan.chain import Chain, Einsum, TensorUse


class LinkMode(enum.Enum):
    """Where an intermediate lives between its producer and its consumer."""

    DRAM = "dram"  # written back off chip, read again
    TILED = "tiled"  # fused: one band tile at a time, on chip
    WHOLE = "whole"  # untiled fusion: the whole intermediate on chip


@dataclass(frozen=True, slots=True)
class Loop:
    """One loop of a nest: ``dim`` split by ``factor`` iterations."""

    dim: str
    factor: int


@dataclass(frozen=True, slots=True)
class Level:
    """The blocking level of the einsum's tensor number ``tensor``."""

    tensor: int


@dataclass(frozen=True, slots=True)
class Nest:
    """One einsum under its segment's band: ``band`` gives the fused factor of each of its
    dims that the band splits; ``items`` the loops and levels below the band, outermost
    first; ``held`` the tensors loaded whole above the band. An intermediate kept whole on
    chip has no level either: all of it is there while its einsum runs."""

    band: tuple[Loop, ...]
    items: tuple[Loop | Level, ...]
    held: tuple[int, ...] = ()

    def level_position(self, tensor: int) -> int | None:
        return next((k for k, item in enumerate(self.items) if item == Level(tensor)), None)


@dataclass(frozen=True, slots=True)
class TensorCost:
    """Off-chip traffic and on-chip tile of one tensor use, in elements and bytes."""

    einsum: int
    tensor: int
    label: str
    reads: int
    writes: int
    bytes: int
    tile: int  # elements on chip while its einsum runs (a held or whole tensor: all of it)
    where: str  # "level k", "held", "tiled", "whole"


@dataclass(frozen=True, slots=True)
class Accounting:
    tensors: tuple[TensorCost, ...]
    footprints: tuple[int, ...]  # per einsum, in the capacity's unit

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)

    @property
    def total_elements(self) -> int:
        return sum(t.reads + t.writes for t in self.tensors)


def link_mode_of(chain: Chain, modes: tuple[LinkMode, ...], einsum: int, tensor: int) -> LinkMode | None:
    """The mode of the link a tensor use belongs to, or None for a tensor that is no link's."""
    k = chain.link_index(einsum, tensor)
    return None if k is None else modes[k]


def segments(modes: tuple[LinkMode, ...]) -> tuple[tuple[int, ...], ...]:
    """The einsums of each segment: neighbours joined by a tiled link share one."""
    groups: list[list[int]] = [[0]]
    for k, mode in enumerate(modes):
        if mode is LinkMode.TILED:
            groups[-1].append(k + 1)
        else:
            groups.append([k + 1])
    return tuple(tuple(g) for g in groups)


def account(
    chain: Chain, nests: tuple[Nest, ...], modes: tuple[LinkMode, ...], *, bytes_unit: bool
) -> Accounting:
    """Exact traffic and footprints of a plan (module doc). ``bytes_unit``: footprints in
    bytes rather than elements."""
    costs: list[TensorCost] = []
    own: list[int] = []
    held_by: list[int] = []  # what each einsum holds for its whole segment
    for e, (einsum, nest) in enumerate(zip(chain.einsums, nests, strict=True)):
        band_trips = math.prod(loop.factor for loop in nest.band)
        total = 0
        held_total = 0
        for t, use in enumerate(einsum.tensors):
            mode = link_mode_of(chain, modes, e, t)
            unit = use.itemsize if bytes_unit else 1
            if mode in (LinkMode.TILED, LinkMode.WHOLE):
                tile = _tile(use, nest, None) if mode is LinkMode.TILED else use.elements
                cost = TensorCost(e, t, use.label, 0, 0, 0, tile, mode.value)
                if mode is LinkMode.WHOLE:
                    held_total += tile * unit
                else:
                    total += tile * unit
            elif t in nest.held:
                cost = TensorCost(
                    e, t, use.label, use.elements, 0, use.elements * use.itemsize, use.elements, "held"
                )
                held_total += use.elements * unit
            else:
                position = nest.level_position(t)
                tile = _tile(use, nest, position)
                outside = nest.items[:position]
                loads = band_trips * math.prod(item.factor for item in outside if isinstance(item, Loop))
                traffic = loads * tile
                reads, writes = (0, traffic) if use.is_output else (traffic, 0)
                if use.is_output and einsum.reads_initial_output:
                    reads = use.elements
                cost = TensorCost(
                    e, t, use.label, reads, writes, (reads + writes) * use.itemsize, tile, f"level {position}"
                )
                total += tile * unit
            costs.append(cost)
        own.append(total)
        held_by.append(held_total)
    footprints = []
    groups = segments(modes)
    for e in range(len(chain.einsums)):
        group = next(g for g in groups if e in g)
        footprint = own[e] + sum(held_by[k] for k in group)
        footprints.append(footprint)
    return Accounting(tuple(costs), tuple(footprints))


def _tile(use: TensorUse, nest: Nest, position: int | None) -> int:
    """The product of the factors of ``use``'s dims inside its level (below ``position``;
    None: every loop of the nest)."""
    inside = nest.items if position is None else nest.items[position + 1 :]
    return math.prod(item.factor for item in inside if isinstance(item, Loop) and item.dim in use.dims)


def reduction_outside_output(einsum: Einsum, nest: Nest) -> str | None:
    """A reduction dim with a loop outside the output's level (a partial sum would leave
    chip), or None."""
    position = nest.level_position(len(einsum.tensors) - 1)
    if position is None:
        return None
    reductions = {d.name for d in einsum.dims if d.reduction}
    for item in nest.items[:position]:
        if isinstance(item, Loop) and item.dim in reductions and item.factor > 1:
            return item.dim
    return None
