"""``polymap.compile`` and ``polymap.optimize`` with ``fuse``: the einsum chain tiled and fused
within an on-chip capacity (``polymap.plan``, docs/fusion.md) before the thread mapping, as
the command line's ``--fuse`` does. Without ``fuse`` they are ``polymap.kernel.compile`` and
``polymap.mapping.solve.optimize`` themselves. (Here, at the top of the package: the planner
sits above the mapping and the pipeline, which it calls.)"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, replace

from polymap import kernel as _kernel
from polymap.errors import ArgumentError, CapacityError, MappingError, PlanError, SolverError
from polymap.ir.nodes import Program
from polymap.mapping import solve as _solve
from polymap.mapping.result import FusionSummary, FusionTried, Mapping
from polymap.plan.planner import Capacity
from polymap.plan.tree import LinkMode
from polymap.progress import step
from polymap.targets import GpuTarget, get_target

FUSE_IF = ("faster", "always", "fastest")

FUSE_NOTE = """

    With ``fuse`` (``True``: the target's shared memory per block, 48 KiB on an H100; or a
    capacity: elements, ``"8K"``, or bytes, ``"32KiB"``), the program's einsum chain is first
    tiled and fused within it (``polymap.plan.planner.plan``), and the segments it fuses a
    tile at a time are rewritten as bands (``polymap.plan.program.program_to_map``; every
    other nest stays as written). With ``fuse_if="faster"`` (the default, None) that program is
    mapped only where the cost model predicts it faster than the program as written (both
    are mapped to compare; ``choose_fusion`` says which and why); ``fuse_if="always"`` maps
    it regardless; ``fuse_if="fastest"`` plans the chain once for each way of linking its
    intermediates (each written back, fused a tile at a time or kept whole on chip; the
    links given stay as given), maps every distinct program those plans make and the program
    as written, and maps the one the cost model predicts fastest (``FusionChoice.tried``
    lists them). ``links`` pin intermediates of the plan as ``plan``'s do (``{"Q":
    "tiled"}``; ``--link Q=tiled``), and ``min_band_tiles`` is ``plan``'s too (a segment fused
    a tile at a time has at least that many band tiles; ``--min-band-tiles``). ``Mapping.program`` is the program mapped, and ``Mapping.fusion`` says
    what was chosen and why (the report's third line, ``"fusion"`` in its JSON). A given
    mapping carries its own program, so ``fuse`` is refused beside one."""


@dataclass(frozen=True, slots=True)
class FusionChoice:
    """What ``fuse`` maps, and why: ``program`` is the fused program (``planned``, planned at
    bound sizes) or the program as given (its sizes still free); ``predicted_s`` the cost model's (fused, as written) times of one run
    where both were mapped to compare, and ``mapping`` the mapping of ``program`` from that
    comparison (None where no comparison ran)."""

    capacity: str
    program: Program
    planned: Program | None  # None: the plan fuses nothing a tile at a time, or not as a band
    predicted_s: tuple[float, float] | None = None
    mapping: Mapping | None = None
    # why the fused program was not compared: the pins or context given name the program
    # as written, and do not apply to it (its loops are the plan's, its sizes bound)
    not_compared: str | None = None
    links: tuple[tuple[str, str], ...] = ()  # the plan's pinned intermediates, as given
    sizes: tuple[tuple[str, int], ...] = ()  # the sizes the plan was made at
    min_band_tiles: int = 1  # as given to the plan
    # with fuse_if="fastest": each program mapped, then each way of linking left out
    tried: tuple[FusionTried, ...] = ()
    # each plan SCIP did not prove optimal within its time limit: what it was and its status
    unproved: tuple[str, ...] = ()

    @property
    def fused(self) -> bool:
        return self.planned is not None and self.program is self.planned

    def summary(self) -> FusionSummary:
        """The choice as the mapping carries it (``Mapping.fusion``)."""
        fused, written = self.predicted_s if self.predicted_s is not None else (None, None)
        planned = self.planned.name if self.planned is not None else None
        return FusionSummary(
            self.capacity,
            self.fused,
            planned,
            fused,
            written,
            self.not_compared,
            self.note(),
            self.links,
            self.sizes,
            self.min_band_tiles,
            self.tried,
            self.unproved,
        )

    def note(self) -> str:
        """One line for the report: what the plan rewrote and which program is mapped, and
        which plans SCIP did not prove optimal."""
        if not self.unproved:
            return self._choice_note()
        return self._choice_note() + (
            f"; not proved optimal within the time limit (raise --time-limit, time_limit=): "
            f"{'; '.join(self.unproved)}"
        )

    def _choice_note(self) -> str:
        pinned = ", ".join(f"{b}={m}" for b, m in self.links)
        head = f"planned within {self.capacity}" + (f" with {pinned}" if pinned else "")
        if self.min_band_tiles > 1:
            head += f", bands of at least {self.min_band_tiles} tiles"
        head += ": "
        if self.tried:
            return head + self._fastest_note()
        if self.planned is None and self.not_compared is not None:  # fuse_if="fastest"
            return head + (
                f"no other way of linking the intermediates was planned ({self.not_compared}; pins and a "
                f"context apply to the program as written): mapping {self.program.name} as written"
            )
        if self.planned is None:
            return head + (
                f"no segment fused a tile at a time to rewrite (each is unfused, kept whole, one nest as "
                f"written, or fused with a band of one tile): mapping {self.program.name} as written"
            )
        if self.not_compared is not None:
            return head + (
                f"the fused program {self.planned.name} was not mapped ({self.not_compared}; pins and a "
                f"context apply to the program as written): mapping {self.program.name} as written"
            )
        if self.predicted_s is None:
            return (
                head + f"mapping {self.planned.name} (fused segments rewritten, the other nests as written)"
            )
        fused, written = (f"{t * 1e6:.4g} us" for t in self.predicted_s)
        if self.fused:
            return head + f"mapping {self.planned.name}, predicted {fused} against {written} as written"
        return head + (
            f"the fused program {self.planned.name} is predicted at {fused}, the program as written at "
            f"{written}: mapping {self.program.name} as written (to map the fused one: --fuse-if always, "
            f'fuse_if="always")'
        )

    def _fastest_note(self) -> str:
        """``note``'s text for fuse_if="fastest": every program mapped, then the ways of
        linking left out."""
        mapped = [t for t in self.tried if t.predicted_s is not None]
        failed = [t for t in self.tried if t.predicted_s is None]
        times = "; ".join(
            f"{t.label()} {t.predicted_s * 1e6:.4g} us" + (" (taken)" if t.taken else "") for t in mapped
        )
        text = f"the fastest of {len(mapped)} programs, one per distinct plan of the links and as written: {times}"
        if len(mapped) == 1:
            text = f"no plan of the links fuses a segment a tile at a time: {times}"
        if failed:
            text += "; left out: " + "; ".join(f"{t.label()} ({t.left_out})" for t in failed)
        return text + f": mapping {self.program.name}"


def choose_fusion(
    program: Program,
    fuse,
    target: str | GpuTarget = "h100",
    *,
    fuse_if: str | None = None,
    links: dict | None = None,
    min_band_tiles: int | None = None,
    **options,
) -> FusionChoice:
    """The program to map for ``fuse`` (see ``FUSE_NOTE``; ``fuse_if`` None is "faster"), with
    ``optimize``'s ``options`` for the comparison (its ``time_limit`` the planner's too);
    ``links`` pins intermediates in the plan as ``plan``'s do."""
    from polymap.ir.validate import check_program_argument
    from polymap.plan.program import fused_plan

    check_program_argument(program, "compile")
    fuse_if = "faster" if fuse_if is None else fuse_if
    if fuse_if not in FUSE_IF:
        raise ArgumentError(f"fuse_if is one of {', '.join(map(repr, FUSE_IF))}, not {fuse_if!r}")
    capacity = Capacity.parse(f"{get_target(target).shared_memory_per_block}B" if fuse is True else fuse)
    # the planner's SCIP gets the time limit each mapping solve gets
    limit = {} if options.get("time_limit") is None else {"time_limit_s": options["time_limit"]}
    floor = {} if min_band_tiles is None else {"min_band_tiles": min_band_tiles}
    with step("plan: SCIP"):
        free_plan = fused_plan(program, capacity, links=links, **floor, **limit)
    candidate = free_plan[1]
    made = {
        # as the planner read them (a mode given as a LinkMode reads as its word)
        "links": tuple((buffer, LinkMode(mode).value) for buffer, mode in (links or {}).items()),
        "sizes": program.bind_defaults().bindings,
        "min_band_tiles": 1 if min_band_tiles is None else min_band_tiles,
    }
    made["unproved"] = _unproved("the plan", free_plan[0])
    label = str(capacity)
    unfused = candidate == program.bind_defaults()
    if unfused and fuse_if != "fastest":  # (another way of linking may fuse: "fastest" tries them)
        return FusionChoice(label, program, None, **made)  # as given: its sizes stay arguments
    if fuse_if == "always":
        return FusionChoice(label, candidate, candidate, **made)
    given = [what for what, key in (("pins", "pins"), ("a context", "context")) if options.get(key)]
    with step("fuse: both programs mapped to compare"):
        written_mapping = _solve.optimize(program, target, **options)
        if given:  # they name the loops and sizes of the program as written, not the fused one's
            why = f"{' and '.join(given)} given"
            planned = None if unfused else candidate
            return _carried(FusionChoice(label, program, planned, None, written_mapping, why, **made))
        if fuse_if == "fastest":
            return _fastest(
                program,
                capacity,
                links or {},
                {**floor, **limit},
                free_plan,
                written_mapping,
                target,
                options,
                made,
            )
        fused_mapping = _solve.optimize(candidate, target, **options)
    times = (sum(c.time_s for c in fused_mapping.costs), sum(c.time_s for c in written_mapping.costs))
    if times[0] < times[1]:
        return _carried(FusionChoice(label, candidate, candidate, times, fused_mapping, **made))
    return _carried(FusionChoice(label, program, candidate, times, written_mapping, **made))


def _fastest(
    program: Program,
    capacity: Capacity,
    links: dict,
    plan_options: dict,
    free_plan: tuple,  # (the plan with the links free, the program it makes)
    written: Mapping,
    target,
    options,
    made,
) -> FusionChoice:
    """``choose_fusion`` with fuse_if="fastest": the chain planned with each free
    intermediate linked each way (``LinkMode``; the links given stay), every distinct program
    mapped, and the program as written (``written``, its mapping); the fastest one kept, the
    program as written on a tie."""
    from polymap.plan.program import fused_plan

    given = {buffer: LinkMode(mode) for buffer, mode in links.items()}
    as_written = program.bind_defaults()
    programs: dict[Program, list[str]] = {}  # per distinct fused program, the links that made it
    unfused: list[str] = []  # the links whose plans fuse nothing a tile at a time
    failed: list[FusionTried] = []

    def record(links_label: str, made_program: Program) -> None:
        (unfused if made_program == as_written else programs.setdefault(made_program, [])).append(links_label)

    # first the plan of fewest bytes with the links free (``fuse_if="faster"``'s): pinning
    # the links it chose may give another plan of as few bytes, with other tiles
    unproved = made.pop("unproved")
    result, made_program = free_plan
    record("free: " + ", ".join(f"{b}={m.value}" for b, m in result.link_modes().items()), made_program)
    free = _free_links(program, given)
    floor = plan_options.get("min_band_tiles", 1)
    for modes in itertools.product(list(LinkMode), repeat=len(free)) if free else ():
        chosen = {**given, **dict(zip(free, modes))}
        label = ", ".join(f"{b}={m.value}" for b, m in chosen.items())
        with step(f"fuse: plan with {label}"):
            try:
                pinned_plan, made_program = fused_plan(program, capacity, links=chosen, **plan_options)
                unproved += _unproved(f"the plan with {label}", pinned_plan)
                record(label, made_program)
            except CapacityError:
                bands = f" with bands of at least {floor} tiles" if floor > 1 else ""
                failed.append(FusionTried((label,), None, left_out=f"it does not fit in {capacity}{bands}"))
            except PlanError as err:
                failed.append(FusionTried((label,), None, left_out=str(err).splitlines()[0]))
    mapped = [(program, written, FusionTried(tuple(unfused), None, as_written=True))]
    for candidate, labels in programs.items():
        with step(f"fuse: mapping the program of {' or '.join(labels)}"):
            try:
                mapping = _solve.optimize(candidate, target, **options)
            except (MappingError, SolverError) as err:  # the others still compare
                why = f"not mapped: {str(err).splitlines()[0]}"
                failed.append(FusionTried(tuple(labels), None, left_out=why))
                continue
        mapped.append((candidate, mapping, FusionTried(tuple(labels), None)))
    times = [sum(c.time_s for c in m.costs) for _, m, _ in mapped]
    best = min(range(len(mapped)), key=times.__getitem__)  # the first of ties: as written
    chosen_program, mapping, _ = mapped[best]
    planned, predicted = None, None
    if len(mapped) > 1:  # some plan fused a segment a tile at a time
        fused = best or min(range(1, len(mapped)), key=times.__getitem__)  # the fastest fused one
        planned, predicted = mapped[fused][0], (times[fused], times[0])
    tried = tuple(
        replace(entry, predicted_s=t, taken=k == best)
        for k, ((_, _, entry), t) in enumerate(zip(mapped, times))
    )
    choice = FusionChoice(
        str(capacity),
        chosen_program,
        planned,
        predicted,
        mapping,
        tried=tried + tuple(failed),
        unproved=unproved,
        **made,
    )
    return _carried(choice)


def _unproved(what: str, result) -> tuple[str, ...]:
    """``what`` and its SCIP status and gap where SCIP did not prove ``result`` optimal."""
    report = result.report
    if report.optimal:
        return ()
    gap = "unknown" if report.gap is None or report.gap == float("inf") else f"{report.gap:.1%}"
    return (f"{what} (SCIP {report.status} in {report.solve_time_s:.3g} s, gap {gap})",)


def _free_links(program: Program, given: dict) -> list[str]:
    """The intermediates of ``program``'s chain that the links ``given`` leave free."""
    from polymap.plan.chain import read_chain

    return [
        link.buffer for link in read_chain(program).links if link is not None and link.buffer not in given
    ]


def _carried(choice: FusionChoice) -> FusionChoice:
    """``choice`` with its comparison's mapping carrying it (``Mapping.fusion``)."""
    return replace(choice, mapping=replace(choice.mapping, fusion=choice.summary()))


def _compile_options(options: dict) -> None:
    """A keyword ``polymap.compile`` does not take is refused as Python refuses it (its
    keywords are ``polymap.kernel.compile``'s own)."""
    taken = set(inspect.signature(_kernel.compile).parameters) - {"program", "mapping", "target"}
    unknown = sorted(set(options) - taken)
    if unknown:
        raise TypeError(f"compile() got an unexpected keyword argument {unknown[0]!r}")


def compile_choice(choice: FusionChoice, target: str | GpuTarget = "h100", **options):
    """The kernel of the program ``choice`` maps, its mapping carrying the choice: the
    comparison's mapping proved again (not solved again), or the program optimized with
    ``options`` (``polymap.kernel.compile``'s) and proved once."""
    from polymap.pipeline import compile_program

    if choice.mapping is not None:
        return _kernel.compile(choice.mapping.program, choice.mapping, target)
    _compile_options(options)
    return _kernel.Kernel(
        compile_program(
            choice.program,
            None,
            target,
            pins=options.get("pins"),
            context=options.get("context"),
            time_limit=options.get("time_limit"),
            reassociate=options.get("reassociate", True),
            deterministic=options.get("deterministic", True),
            fusion=choice.summary(),
        )
    )


def _checked(
    fuse, mapping: Mapping | None, fuse_if: str | None, links: dict | None, min_band_tiles: int | None = None
) -> bool:
    """Whether ``fuse`` asks for a plan (refused beside a given mapping; ``fuse_if``,
    ``links`` or ``min_band_tiles`` without one are refused too: they would change nothing)."""
    if fuse is None or fuse is False:
        if fuse_if is not None:
            raise ArgumentError(
                f"fuse_if={fuse_if!r} chooses between a fused program and the program as written; pass fuse too"
            )
        if links is not None:
            raise ArgumentError("links pin intermediates of the plan fuse makes; pass fuse too")
        if min_band_tiles is not None:
            raise ArgumentError("min_band_tiles shapes the bands of the plan fuse makes; pass fuse too")
        return False
    if mapping is not None:
        raise ArgumentError(
            "fuse plans the program before a mapping is chosen; a given mapping is of its own program "
            "(pass mapping.program, planned as it was, and no fuse)"
        )
    return True


def compile(
    program: Program,
    mapping: Mapping | None = None,
    target: str | GpuTarget = "h100",
    *,
    fuse=None,
    fuse_if: str | None = None,
    links: dict | None = None,
    min_band_tiles: int | None = None,
    **options,
):  # noqa: A001 (polymap.compile)
    if not _checked(fuse, mapping, fuse_if, links, min_band_tiles):
        return _kernel.compile(program, mapping, target, **options)
    _compile_options(options)  # before the plan and the comparison's solves
    choice = choose_fusion(
        program, fuse, target, fuse_if=fuse_if, links=links, min_band_tiles=min_band_tiles, **options
    )
    return compile_choice(choice, target, **options)


def optimize(
    program: Program,
    target: str | GpuTarget = "h100",
    *,
    fuse=None,
    fuse_if: str | None = None,
    links: dict | None = None,
    min_band_tiles: int | None = None,
    **options,
) -> Mapping:
    if not _checked(fuse, None, fuse_if, links, min_band_tiles):
        return _solve.optimize(program, target, **options)
    choice = choose_fusion(
        program, fuse, target, fuse_if=fuse_if, links=links, min_band_tiles=min_band_tiles, **options
    )
    if choice.mapping is not None:
        return choice.mapping
    return replace(_solve.optimize(choice.program, target, **options), fusion=choice.summary())


compile.__doc__ = (_kernel.compile.__doc__ or "") + FUSE_NOTE
optimize.__doc__ = (_solve.optimize.__doc__ or "") + FUSE_NOTE
