"""The Pareto frontier of on-chip capacity against off-chip bytes (Orojenesis' figures).

For each capacity, SCIP plans the chain three times, each time in a larger space:

- ``unfused``: every intermediate written back;
- ``untiled``: an intermediate may also stay whole on chip (untiled fusion);
- ``tiled``: it may also be fused a band tile at a time (the planner's whole space).

Each point is an optimum proved by SCIP, so each strategy's bytes never grow with the
capacity, and at every capacity tiled <= untiled <= unfused; :func:`frontier` checks both.
A capacity where no plan of a strategy fits has no point.
"""

from __future__ import annotations

from dataclasses import dataclass

from polymap.errors import ArgumentError, CapacityError, InternalError
from polymap.ir.nodes import Program
from polymap.plan.planner import DEFAULT_TIME_LIMIT_S, Capacity, Plan, plan

STRATEGIES = ("unfused", "untiled", "tiled")


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    strategy: str
    capacity: int
    plan: Plan | None  # None: no plan of this strategy fits

    @property
    def bytes(self) -> int | None:
        return None if self.plan is None else self.plan.bytes


@dataclass(frozen=True, slots=True)
class Frontier:
    program: str
    unit: str  # the capacities' unit: elements or bytes
    capacities: tuple[int, ...]
    points: tuple[FrontierPoint, ...]

    def point(self, strategy: str, capacity: int) -> FrontierPoint:
        return next(p for p in self.points if p.strategy == strategy and p.capacity == capacity)

    def table(self) -> str:
        rows = [("capacity (" + self.unit + ")",) + tuple(f"{s} (bytes)" for s in STRATEGIES)]
        for capacity in self.capacities:
            cells = []
            for strategy in STRATEGIES:
                p = self.point(strategy, capacity)
                mark = "" if p.plan is None or p.plan.report.optimal else f" ({p.plan.report.status})"
                cells.append("no plan fits" if p.bytes is None else f"{p.bytes}{mark}")
            rows.append((str(capacity), *cells))
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        stopped = [p for p in self.points if p.plan is not None and not p.plan.report.optimal]
        proved = (
            "SCIP optimal per point"
            if not stopped
            else f"SCIP optimal per point but the {len(stopped)} marked with the status SCIP stopped at "
            "(its best plan then, not proved the fewest bytes, and a larger space's may be worse "
            "than a smaller one's: raise --time-limit)"
        )
        lines = [f"frontier of {self.program}: the fewest off-chip bytes at each capacity, {proved}"]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join(lines)


def capacity_list(text: str) -> list[Capacity]:
    """``"4K,16K,64K"``, or ``"1K..1M"`` for every power of two from 1K to 1M (a unit on the
    ends makes them bytes: ``"16KiB..1MiB"``)."""
    if ".." in text:
        low_text, _, high_text = text.partition("..")
        low, high = Capacity.parse(low_text), Capacity.parse(high_text)
        if low.in_bytes != high.in_bytes or low.amount > high.amount:
            raise ArgumentError(f"capacities {text!r}: expected LOW..HIGH in one unit, LOW <= HIGH")
        found, amount = [], low.amount
        while amount <= high.amount:
            found.append(Capacity(amount, low.in_bytes))
            amount *= 2
        if found[-1].amount != high.amount:  # the high end would be left out without a word
            raise ArgumentError(
                f"capacities {text!r}: the range doubles from {low}, so {high} is not in it (the high end "
                f"is the low times a power of two: {found[-1]} or {Capacity(amount, low.in_bytes)})"
            )
        if len(found) > 40:
            raise ArgumentError(f"capacities {text!r}: {len(found)} points; give at most 40")
        return found
    return [Capacity.parse(part) for part in text.split(",")]


def frontier(
    program: Program,
    capacities,
    *,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> Frontier:
    """The three strategies' optimal bytes at each of ``capacities`` (numbers of elements,
    or texts such as ``"64KiB"``; all in one unit)."""
    parsed = [c if isinstance(c, Capacity) else Capacity.parse(c) for c in capacities]
    if not parsed:
        raise ArgumentError("frontier: give at least one capacity")
    if len({c.in_bytes for c in parsed}) > 1:
        raise ArgumentError("frontier: give every capacity in one unit (all elements, or all bytes)")
    parsed = sorted(set(parsed), key=lambda c: c.amount)
    points = []
    for cap in parsed:
        for strategy in STRATEGIES:
            points.append(
                FrontierPoint(strategy, cap.amount, _plan_or_none(program, cap, strategy, time_limit_s))
            )
    result = Frontier(program.name, parsed[0].unit, tuple(c.amount for c in parsed), tuple(points))
    _check(result)
    return result


def _plan_or_none(program: Program, cap: Capacity, strategy: str, time_limit_s) -> Plan | None:
    try:
        return plan(program, cap, time_limit_s=time_limit_s, strategy=strategy)
    except CapacityError:
        return None


def _check(result: Frontier) -> None:
    """What optimality implies: no strategy's bytes grow with capacity, and a larger space is
    never worse. A violation is a solver tolerance or a bug, never a finding to print."""
    for strategy in STRATEGIES:
        previous = None
        for capacity in result.capacities:
            p = result.point(strategy, capacity)
            if p.plan is None or not p.plan.report.optimal:
                continue
            if previous is not None and p.bytes > previous:
                raise InternalError(f"the {strategy} frontier rises at capacity {capacity}")
            previous = p.bytes
    for capacity in result.capacities:
        values = [result.point(s, capacity) for s in STRATEGIES]
        for wider, narrower in zip(values[1:], values[:-1]):
            if (
                wider.plan is not None
                and narrower.plan is not None
                and wider.plan.report.optimal
                and wider.bytes > narrower.bytes
            ):
                raise InternalError(
                    f"at capacity {capacity}, {wider.strategy} plans worse than {narrower.strategy}"
                )
