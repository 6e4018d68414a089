"""An enumeration oracle for the fusion planner, written apart from it.

It lists every plan of a small chain (every band, link mode, held set, order of levels and
split of every loop into buckets) and costs each one by walking its loops: a tensor's tile
is the set of elements it touches inside its level, counted point by point, and it is
loaded once per iteration of the loops outside its level. Nothing here calls the planner's
formulation or its accounting; only the chain (the planner's reading of the program, tested
on its own) is shared.
"""

from __future__ import annotations

import itertools
import math

from polymap.plan.chain import Chain


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def splits(n: int, parts: int):
    """Every way to write n as an ordered product of ``parts`` factors."""
    if parts == 1:
        yield (n,)
        return
    for d in divisors(n):
        for rest in splits(n // d, parts - 1):
            yield (d,) + rest


def _elements(use, loops, point_outer):
    """The elements of ``use`` touched by every point of ``loops`` (the loops inside a level:
    (dim, factor, stride) triples), with the outer loops fixed at ``point_outer`` (a dict
    dim -> offset)."""
    seen = set()
    ranges = [range(f) for _, f, _ in loops]
    for point in itertools.product(*ranges):
        coords = dict(point_outer)
        for (dim, _, stride), i in zip(loops, point, strict=True):
            coords[dim] = coords.get(dim, 0) + i * stride
        seen.add(tuple(coords[d] for d in use.dims))
    return seen


def nest_cost(einsum, band: dict[str, int], order, buckets: dict[str, tuple[int, ...]], skip):
    """(traffic per tensor, tile per tensor) of one einsum's nest, walked point by point, or
    None when a partial sum would leave chip. ``order``: tensor indices, outermost level
    first; ``buckets[dim][b]``: the factor of dim in bucket b (b = 0 above the first level);
    ``skip``: tensors with no level (held or on chip: costed by the caller)."""
    loops = []  # (dim, factor, stride) outermost first, with the band in front
    strides = {d.name: d.size for d in einsum.dims}
    for dim, f in band.items():
        strides[dim] //= f
        loops.append((dim, f, strides[dim]))
    level_at = {}
    for b in range(len(order) + 1):
        for d in einsum.dims:
            f = buckets[d.name][b]
            strides[d.name] //= f
            loops.append((d.name, f, strides[d.name]))
        if b < len(order):
            level_at[order[b]] = len(loops)
    traffic, tiles = {}, {}
    out = len(einsum.tensors) - 1
    reductions = {d.name for d in einsum.dims if d.reduction}
    for t, use in enumerate(einsum.tensors):
        if t in skip:
            continue
        outer, inner = loops[: level_at[t]], loops[level_at[t] :]
        if t == out and any(dim in reductions and f > 1 for dim, f, _ in outer):
            return None
        total, tile = 0, 0
        for point in itertools.product(*[range(f) for _, f, _ in outer]):
            offset = {}
            for (dim, _, stride), i in zip(outer, point, strict=True):
                offset[dim] = offset.get(dim, 0) + i * stride
            touched = len(_elements(use, inner, offset))
            total += touched
            tile = max(tile, touched)
        traffic[t], tiles[t] = total, tile
    return traffic, tiles


def best_bytes(chain: Chain, capacity: int, min_band_tiles: int = 1) -> int | None:
    """The fewest bytes any plan of ``chain`` moves within ``capacity`` elements, or None;
    a segment of several einsums has at least ``min_band_tiles`` band tiles."""
    best = None
    link_options = [("dram",) if link is None else ("dram", "tiled", "whole") for link in chain.links]
    for modes in itertools.product(*link_options):
        if not _allowed(chain, modes):
            continue
        for bands in _bands(chain, modes):
            if any(
                len(group) > 1 and math.prod(bands[group[0]].values()) < min_band_tiles
                for group in _groups(modes)
            ):
                continue
            holdable = [
                (e, t)
                for e, einsum in enumerate(chain.einsums)
                for t, use in enumerate(einsum.tensors)
                if not use.is_output and _link_mode(chain, modes, e, t) is None
            ]
            for held_bits in itertools.product((False, True), repeat=len(holdable)):
                held = {pair for pair, bit in zip(holdable, held_bits, strict=True) if bit}
                total = _best_given(chain, modes, bands, held, capacity)
                if total is not None and (best is None or total < best):
                    best = total
    return best


def _link_mode(chain, modes, e, t):
    use = chain.einsums[e].tensors[t]
    if use.is_output and e < len(chain.links) and chain.links[e] and chain.links[e].buffer == use.buffer:
        return modes[e]
    if not use.is_output and e > 0 and chain.links[e - 1] and chain.links[e - 1].buffer == use.buffer:
        return modes[e - 1]
    return None


def _groups(modes):
    groups = [[0]]
    for k, mode in enumerate(modes):
        if mode == "tiled":
            groups[-1].append(k + 1)
        else:
            groups.append([k + 1])
    return groups


def _allowed(chain, modes):
    groups = _groups(modes)
    for j, k, _ in chain.conflicts:
        if any(j in g and k in g for g in groups):
            return False
    return True


def _bands(chain, modes):
    """Every assignment of fused factors: per segment, one factor per rank that every einsum
    of the segment writes, lined up through its links."""
    per_segment = []
    for group in _groups(modes):
        if len(group) == 1:
            per_segment.append([{group[0]: {}}])
            continue
        # ranks: chains of output dims through the links of the segment
        ranks = [[(group[0], d.name)] for d in chain.einsums[group[0]].dims if not d.reduction]
        for e in group[1:]:
            pairs = dict(chain.links[e - 1].dim_pairs)
            ranks = [r + [(e, pairs[r[-1][1]])] for r in ranks if r[-1][1] in pairs]
            ranks = [r for r in ranks if not chain.einsums[e].dim(r[-1][1]).reduction]
        options = []
        sizes = [chain.einsums[r[0][0]].dim(r[0][1]).size for r in ranks]
        for factors in itertools.product(*[divisors(s) for s in sizes]):
            band = {e: {} for e in group}
            for rank, f in zip(ranks, factors, strict=True):
                if f > 1:
                    for e, dim in rank:
                        band[e][dim] = f
            options.append(band)
        per_segment.append(options)
    for choice in itertools.product(*per_segment):
        merged = {}
        for band in choice:
            merged.update(band)
        yield merged


def _best_given(chain, modes, bands, held, capacity):
    groups = _groups(modes)
    kept = [0] * len(chain.einsums)  # what each einsum holds for its segment
    fixed_bytes = 0
    for e, einsum in enumerate(chain.einsums):
        for t, use in enumerate(einsum.tensors):
            mode = _link_mode(chain, modes, e, t)
            if (e, t) in held:
                kept[e] += use.elements
                fixed_bytes += use.elements * use.itemsize
            elif mode == "whole":
                kept[e] += use.elements
    total = fixed_bytes
    for e, einsum in enumerate(chain.einsums):
        group = next(g for g in groups if e in g)
        room = capacity - sum(kept[k] for k in group)
        local = _best_nest(chain, modes, bands[e], held, e, room)
        if local is None:
            return None
        total += local
    return total


def _best_nest(chain, modes, band, held, e, room):
    einsum = chain.einsums[e]
    n = len(einsum.tensors)
    local = {d.name: d.size // band.get(d.name, 1) for d in einsum.dims}
    on_chip = {t for t in range(n) if _link_mode(chain, modes, e, t) in ("tiled", "whole")}
    skip = {t for t in range(n) if (e, t) in held or _link_mode(chain, modes, e, t) == "whole"}
    best = None
    for order in itertools.permutations(range(n)):
        for split in itertools.product(*[list(splits(local[d.name], n + 1)) for d in einsum.dims]):
            buckets = {d.name: s for d, s in zip(einsum.dims, split, strict=True)}
            cost = nest_cost(einsum, band, order, buckets, skip)
            if cost is None:
                continue
            traffic, tiles = cost
            feasible = True
            for t in on_chip - skip:  # a tiled intermediate: its whole extent under the band
                if tiles[t] != math.prod(local[d] for d in einsum.tensors[t].dims):
                    feasible = False
            if not feasible or sum(tiles.values()) > room:
                continue
            moved = 0
            for t, use in enumerate(einsum.tensors):
                if t in skip or t in on_chip:
                    continue
                moved += traffic[t] * use.itemsize
                if use.is_output and einsum.reads_initial_output:
                    moved += use.elements * use.itemsize
            if best is None or moved < best:
                best = moved
    return best
