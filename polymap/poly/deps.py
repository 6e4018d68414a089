"""Memory-based dependences (flow, anti, output) between statement instances.

isl's dataflow analysis (``UnionAccessInfo.compute_flow``) is run with every source as a
*may* source: may sources never kill each other, so each pair of conflicting accesses
ordered by the schedule is kept, not only the last writer before a read. That is what a
transformation must preserve when it reorders instances (value-based dependences would
allow more, but need exact kill analysis that later stages do not rely on).

* flow:   a write, then a read of the same element (read after write);
* anti:   a read, then a write of the same element (write after read);
* output: a write, then another write of the same element.

Accesses of one statement instance are not ordered against each other: an update
``s[0] += x`` reads then writes inside one instance, which needs no dependence. Nor are
atomic updates with one operator (``O[I[i]] += x``, ``atomic s[0] += x``): they commute.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import islpy as isl

from polymap.poly.isl_text import IslNames

if TYPE_CHECKING:
    from polymap.poly.model import StatementModel


class DepKind(enum.Enum):
    FLOW = "flow"  # write -> read
    ANTI = "anti"  # read -> write
    OUTPUT = "output"  # write -> write


@dataclass(frozen=True, slots=True, eq=False)
class Dependence:
    """Instances of ``sink`` that must run after instances of ``source`` because both touch
    one element of ``buffer``; ``relation`` maps source instances to sink instances."""

    kind: DepKind
    source: str
    sink: str
    buffer: str
    relation: isl.Map

    def __str__(self) -> str:
        return f"{self.kind.value} {self.source} -> {self.sink} on {self.buffer}: {self.relation}"


@dataclass(frozen=True, slots=True, eq=False)
class Dependences:
    """The three dependence relations (statement instance -> statement instance) and the
    same split per (kind, source statement, sink statement, buffer) in ``items``."""

    flow: isl.UnionMap
    anti: isl.UnionMap
    output: isl.UnionMap
    items: tuple[Dependence, ...]

    def all(self) -> isl.UnionMap:
        """Every dependence: what a legal reordering of instances must preserve."""
        return self.flow.union(self.anti).union(self.output)

    def of(self, kind: DepKind) -> tuple[Dependence, ...]:
        return tuple(d for d in self.items if d.kind is kind)

    def between(self, source: str, sink: str) -> tuple[Dependence, ...]:
        """The dependences from statement ``source`` to statement ``sink``."""
        return tuple(d for d in self.items if d.source == source and d.sink == sink)

    def carried_only_on(self, statements: set[str], depth: int, buffers: set[str]) -> bool:
        """Whether no dependence between two of ``statements`` joins two iterations of the
        loop at ``depth`` (0: their outermost loop) with equal indices of the loops around it,
        except dependences on ``buffers`` (isl: each relation, with the outer indices equated,
        minus its pairs of equal indices at ``depth``, is empty). The statements must share
        their loops down to ``depth``. This is what lets the loop's iterations run in any
        order, the updates of ``buffers`` aside: over the lanes of a warp
        (``mapping.lanes``), or split into parts (``transform.split``)."""
        for dep in self.items:
            if dep.source not in statements or dep.sink not in statements or dep.buffer in buffers:
                continue
            pairs = dep.relation
            for d in range(depth):
                pairs = pairs.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
            same = pairs.equate(isl.dim_type.in_, depth, isl.dim_type.out, depth)
            if not pairs.subtract(same).is_empty():
                return False
        return True


def dependences(
    statements: tuple[StatementModel, ...], schedule: isl.UnionMap, tuples: IslNames
) -> Dependences:
    """Flow, anti and output dependences of the statements under ``schedule``.

    ``tuples`` maps isl tuple names back to statement and buffer names for ``items``."""
    reads = union_of(a.relation for s in statements for a in s.reads)
    writes = union_of(a.relation for s in statements for a in s.writes)
    order = {s.name: k for k, s in enumerate(statements)}
    relations: dict[DepKind, isl.UnionMap] = {}
    items: list[Dependence] = []
    for kind, sinks, sources in (
        (DepKind.FLOW, reads, writes),
        (DepKind.ANTI, writes, reads),
        (DepKind.OUTPUT, writes, writes),
    ):
        flow = (
            isl.UnionAccessInfo.from_sink(sinks)
            .set_may_source(sources)
            .set_schedule_map(schedule)
            .compute_flow()
        )
        relations[kind] = flow.get_may_dependence()
        # The full form is source -> [sink -> element]; it tells which buffer is involved.
        full = flow.get_full_may_dependence()
        found: list[isl.Map] = []
        full.foreach_map(found.append)
        for full_map in found:
            data = full_map.range().unwrap()
            relation = full_map.range_factor_domain()
            source, sink = (
                relation.get_tuple_name(isl.dim_type.in_),
                relation.get_tuple_name(isl.dim_type.out),
            )
            buffer = tuples.user(data.get_tuple_name(isl.dim_type.out))
            items.append(Dependence(kind, tuples.user(source), tuples.user(sink), buffer, relation))
    # atomic updates with operators that commute (one operator, or += and -=:
    # ``Access.commutes_with``) have no order between them to keep. An atomic update reads
    # its target only in the update (validate), so a pair of such statements on that
    # buffer is a pair of atomics
    atomic = {(s.name, w.buffer): w.atomic for s in statements for w in s.writes if w.atomic is not None}

    def commute(d: Dependence) -> bool:
        first, second = atomic.get((d.source, d.buffer)), atomic.get((d.sink, d.buffer))
        return first is not None and second is not None and first.commutes_atomically_with(second)

    kept = [d for d in items if not commute(d)]
    if len(kept) < len(items):
        items = kept
        for kind in DepKind:
            relations[kind] = union_of(d.relation for d in items if d.kind is kind)
    kinds = list(DepKind)
    items.sort(key=lambda d: (kinds.index(d.kind), order.get(d.source, 0), order.get(d.sink, 0), d.buffer))
    return Dependences(
        relations[DepKind.FLOW], relations[DepKind.ANTI], relations[DepKind.OUTPUT], tuple(items)
    )


def union_of(maps) -> isl.UnionMap:
    """The union of ``maps`` (isl.Map), as one UnionMap."""
    result = isl.UnionMap("{ }")
    for m in maps:
        result = result.union(isl.UnionMap.from_map(m))
    return result
