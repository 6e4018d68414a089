"""The pipeline: ``optimize`` and ``compile`` as one list of named steps.

::

    parse      text -> Program                          (ir.parse; the caller's step)
    scans      Program -> Program                        (an argmax's select scan as exact passes, if SCIP's costs say so)
    split      Program -> Program                        (reductions into parts, if SCIP's costs say so)
    transform  Program -> Program                        (fold deep bands, accumulators and invariant reads in registers)
    analyze    Program, context -> PolyModel             (poly.model, once per distinct pair)
    map        bound PolyModel -> decisions, costs       (mapping.solve: SCIP per kernel, the cost model)
    prove      PolyModel, decisions -> VerificationReport (polymap.prove)
    schedule   PolyModel, KernelMapping -> isl AST        (schedule.kernel, run by the emitter)
    emit       Mapping, PolyModel -> CUDA C               (codegen.cuda)

Two programs are analyzed in an optimize: the mapped program with symbolic sizes (under
the context: what is proved and emitted) and the same program with the sizes of the cost
estimate bound (what the cost model and SCIP see); the program as written is analyzed
first when it differs (its errors are the user's, reported on the text they wrote), and
register promotion analyzes what it rewrites. A band deeper than three par loops whose sizes
are symbolic (not folded) is rewritten once per choice of the three loops that get hardware
axes, and each rewrite is analyzed at the cost sizes and mapped (``choose_band_axes``): the
cheapest is the mapping. A reduction loop of a kernel that fills little of the GPU is
likewise split into parts once per option (``split_choice.choose_splits``): each option is
transformed, analyzed and mapped, and the cheapest kept; before that, a select scan (an
argmax) is mapped as written and as exact passes (``scan_choice.choose_scans``). :class:`Analyses` keeps every model built
during one call, so that no (program, context) is analyzed twice and each step receives
the model instead of rebuilding it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from polymap.codegen.cuda import CudaProgram, emit_cuda
from polymap.errors import ArgumentError, MappingError, SolverError
from polymap.ir.atomics import check_determinism
from polymap.ir.nodes import Program
from polymap.ir.online_sums import infinite_start_notes
from polymap.ir.zero_starts import zero_start_notes
from polymap.mapping.result import BandChoice, FusionSummary, Mapping, given_report
from polymap.mapping.solve import cost_kernels, cost_sizes, map_kernels, rebind
from polymap.mapping.space import kernels, parse_pins
from polymap.poly.model import PolyModel, analyze
from polymap.progress import step
from polymap.prove import mapped_program, prove
from polymap.scan_choice import choose_scans
from polymap.split_choice import choose_splits, first_line, program_objective, renumbered
from polymap.targets import GpuTarget, get_target
from polymap.transform.fold import deep_bands, fold_deep_bands
from polymap.transform.invariant_reads import hold_invariant_reads
from polymap.transform.registers import promote_accumulators


@dataclass
class Analyses:
    """The polyhedral models built during one pipeline run, one per (program, context).
    Programs are frozen and compared by value, so a rewrite that changes nothing, or two
    steps that reach the same program, share one model."""

    models: dict[tuple[Program, str | None], PolyModel] = field(default_factory=dict)
    # kernels SCIP solved during the run, for the rewrites that share them (``mapping.solved``)
    kernels: dict = field(default_factory=dict)

    def __call__(self, program: Program, context: str | None = None) -> PolyModel:
        key = (program, context)
        if key not in self.models:
            self.models[key] = analyze(program, context=context)
        return self.models[key]


@dataclass(frozen=True, slots=True, eq=False)
class Mapped:
    """A proved mapping with the model of its program under its context (what ``emit``
    needs next)."""

    mapping: Mapping
    model: PolyModel


def optimize_program(
    program: Program,
    target: str | GpuTarget,
    *,
    pins,
    context: str | None,
    time_limit: float | None,
    registers: bool = True,
    staging: bool = True,
    analyses: Analyses | None = None,
    reassociate: bool = True,
    deterministic: bool = True,
) -> Mapped:
    """The steps of ``polymap.optimize`` (see its docstring for the options)."""
    analyses = analyses if analyses is not None else Analyses()
    gpu, pinned = get_target(target), parse_pins(pins)
    with step("analysis"):
        analyses(program, context)  # the program as written must be valid
    check_determinism(program, deterministic)
    notes = zero_start_notes(program) + infinite_start_notes(program)
    sizes = cost_sizes(program, context)

    split_pins, pinned = pinned.split_parts(), pinned.without("split")
    scan_pins, pinned = pinned.scan_passes(), pinned.without("passes")

    def rewrite_and_map(written: Program, axes: dict[int, frozenset[str]], pins):
        """``written`` rewritten (``axes``: the deep bands' choices), mapped at the cost sizes."""
        with step("rewrites (deep bands folded, accumulators and invariant reads to registers)"):
            rewritten = transform(written, registers=registers, analyses=analyses, axes=axes, context=context)
        with step("analysis at the cost sizes"):
            bound_model = analyses(rewritten.bind(**sizes))
        symbolic = analyses(rewritten, context)  # the proof's program: where lanes must hold
        return rewritten, map_kernels(
            bound_model,
            gpu,
            pins,
            time_limit,
            staging,
            rewritten,
            reassociate,
            symbolic,
            memo=analyses.kernels,
        )

    def map_written(written: Program, origins: tuple[int, ...]):
        """``written`` rewritten and mapped, its deep bands' axes chosen by SCIP's costs
        (``origins``: the kernel as written each kernel comes from, for ``kernelN.`` pins)."""
        pins = renumbered(pinned, origins, written)
        bands = deep_bands(written)
        if bands:
            return choose_band_axes(bands, lambda axes: rewrite_and_map(written, axes, pins))
        return (*rewrite_and_map(written, {}, pins), ())

    def whole_objective(written: Program) -> float:
        """SCIP's objective for ``written`` mapped as the pipeline maps it (unsplit)."""
        return program_objective(map_written(written, tuple(range(len(kernels(written)))))[1])

    def split_and_map(written: Program):
        """``written`` mapped with its reductions split where that pays (``choose_splits``)."""
        return choose_splits(
            written,
            map_written,
            split_pins,
            gpu=gpu,
            sizes=sizes,
            reassociate=reassociate,
            analyses=analyses,
            context=context,
            deterministic=deterministic,
        )

    def split_objective(written: Program) -> float:
        """SCIP's objective for ``written`` mapped as the pipeline maps it, splits chosen."""
        (_, solved, _), _ = split_and_map(written)
        return program_objective(solved)

    program, scan_choices = choose_scans(
        program,
        whole_objective,
        scan_pins,
        analyses=analyses,
        context=context,
        split_objective=split_objective,
    )
    (program, solved, choices), split_choices = split_and_map(program)
    symbolic = tuple(rebind(km, kernels(program)) for km, _, _ in solved)
    with step("proof by isl"):
        model = analyses(program, context)
        proof = prove(model, symbolic, context=context)
    mapping = Mapping(
        program,
        gpu,
        symbolic,
        tuple(c for _, c, _ in solved),
        tuple(r for _, _, r in solved),
        tuple(sizes.items()),
        proof,
        context,
        band_choices=choices,
        splits=split_choices,
        scans=scan_choices,
        notes=notes,
        deterministic=deterministic,
    )
    return Mapped(mapping, model)


def transform(
    program: Program,
    *,
    registers: bool,
    analyses: Analyses,
    axes: dict[int, frozenset[str]] | None = None,
    context: str | None = None,
) -> Program:
    """The program rewrites, in order: deep bands folded (a band that stays deeper than three
    reordered so that the loops of ``axes[its number]`` get the hardware axes), then (with
    ``registers``) accumulators promoted to registers and the elements a loop reads but never
    changes loaded once before it (``transform.invariant_reads``), each rewrite proved by
    ``analyses`` under ``context`` (a program whose bounds hold only in its context proves nothing
    without it, and would keep every accumulator in memory)."""
    program = fold_deep_bands(program, axes=axes)
    if registers:
        program = promote_accumulators(program, analyze=lambda p: analyses(p, context))
        program = hold_invariant_reads(program, analyze=lambda p: analyses(p, context))
    return program


def choose_band_axes(bands, rewrite_and_map):
    """Which three loops of each deep band (``transform.fold.deep_bands``: symbolic sizes,
    so not folded) get the hardware axes: the program is rewritten for each choice, analyzed
    at the cost sizes and mapped by SCIP (``rewrite_and_map(axes)``), and the choice with the
    lowest objective (the sum of its kernels' objectives times their launches) is kept; on a
    tie, the first (``rule_axes``'s). Bands are chosen one after another, each with the
    earlier ones' choices. A choice SCIP finds no mapping for (a pin on a loop it runs inside
    the thread, say) is reported, and its error raised if no choice has a mapping. Returns
    the rewritten program, its solved kernels and a BandChoice per band."""
    axes: dict[int, frozenset[str]] = {}
    choices = []
    best = None
    for band in bands:
        tried = []  # (choice, objective or None, (program, solved) or the error)
        for option in band.choices:
            with step(f"mapping with hardware axes for {', '.join(i for i in band.indices if i in option)}"):
                try:
                    candidate, solved = rewrite_and_map({**axes, band.number: option})
                except (MappingError, SolverError, ArgumentError) as err:
                    tried.append((option, None, err))
                    continue
            objective = program_objective(solved)
            tried.append((option, objective, (candidate, solved)))
        found = [t for t in tried if t[1] is not None]
        if not found:
            raise tried[0][2]
        option, _, best = min(found, key=lambda t: t[1])  # min keeps the first of ties
        axes[band.number] = option
        choices.append(
            BandChoice(
                band.indices,
                tuple(
                    (
                        tuple(i for i in band.indices if i in o),
                        cost,
                        "" if cost is not None else first_line(outcome),
                    )
                    for o, cost, outcome in tried
                ),
                next(k for k, t in enumerate(tried) if t[0] == option),
            )
        )
    candidate, solved = best
    return candidate, solved, tuple(choices)


def compile_program(
    program: Program,
    mapping: Mapping | None,
    target: str | GpuTarget,
    *,
    pins,
    context: str | None,
    time_limit: float | None,
    reassociate: bool = True,
    deterministic: bool = True,
    fusion: FusionSummary | None = None,
) -> CudaProgram:
    """The steps of ``polymap.compile``: optimize (or prove a given mapping), then emit;
    ``fusion``: what ``fuse`` chose, for the mapping optimize makes to carry."""
    analyses = Analyses()
    if mapping is None:
        mapped = optimize_program(
            program,
            target,
            pins=pins,
            context=context,
            time_limit=time_limit,
            analyses=analyses,
            reassociate=reassociate,
            deterministic=deterministic,
        )
        if fusion is not None:
            mapped = Mapped(replace(mapped.mapping, fusion=fusion), mapped.model)
    else:
        if pins is not None or context is not None or not reassociate or not deterministic:
            raise ArgumentError(
                "pins, context, reassociate and deterministic belong to optimize; a given mapping already "
                "fixes them (its report says which loops reorder a float sum and which updates are atomic)"
            )
        mapped = given(program, mapping, analyses=analyses)
    with step("code generation"):
        return emit_cuda(mapped.mapping, model=mapped.model)


def given(program: Program, mapping: Mapping, *, analyses: Analyses | None = None) -> Mapped:
    """A mapping made by hand for ``program`` (or for ``program`` as optimize rewrote it),
    proved again under its context before any code is generated, with its costs computed
    again by the cost model (``KernelProblem.cost``) at the cost sizes. Decisions that are
    not the ones the mapping's own proof covers (edited after ``optimize``, or made from
    scratch) were not solved: their solver entries say so (``given_report``)."""
    analyses = analyses if analyses is not None else Analyses()
    if not isinstance(mapping, Mapping):
        raise ArgumentError(
            f"mapping must be a polymap Mapping (from optimize), got {type(mapping).__name__}"
        )
    program = mapped_program(program, mapping, analyze=analyses)
    if mapping.program != program:
        replayed = " (its splits of reductions do not apply to this program)" if mapping.splits else ""
        which = (
            f"another program named '{program.name}'"
            if mapping.program.name == program.name
            else f"program '{mapping.program.name}', not for this program '{program.name}'"
        )
        raise ArgumentError(
            f"the mapping is for {which}{replayed} (optimize this program, or pass mapping.program)"
        )
    check_determinism(program, mapping.deterministic)
    model = analyses(program, mapping.context)
    proof = prove(model, mapping.kernels, context=mapping.context)
    solved = mapping.proved and not mapping.given  # the decisions optimize solved and proved
    sizes = cost_sizes(program, mapping.context)
    costs = cost_kernels(analyses(program.bind(**sizes)), mapping.target, mapping.kernels)
    for km, cost in zip(mapping.kernels, costs):
        target = mapping.target
        block, limits = km.block_dim(), target.block_dim_limits
        if km.threads_per_block > target.max_threads_per_block or any(d > m for d, m in zip(block, limits)):
            raise ArgumentError(
                f"{km.kernel.name}: its block of {'x'.join(map(str, block))} threads is beyond what {target.name} "
                f"launches ({target.max_threads_per_block} threads per block, at most "
                f"{'x'.join(map(str, limits))} per axis)"
            )
        if cost.shared_bytes > mapping.target.shared_memory_per_block:
            raise ArgumentError(
                f"{km.kernel.name}: its tiles and shared arrays take {cost.shared_bytes} bytes of shared memory "
                "per block, more "
                f"than a block of {mapping.target.name} may use ({mapping.target.shared_memory_per_block}); "
                "fewer staged buffers, smaller tiles or one slot would fit"
            )
    solver = mapping.solver if solved else tuple(given_report() for _ in mapping.kernels)
    remade = replace(
        mapping, costs=costs, solver=solver, cost_sizes=tuple(sizes.items()), proof=proof, given=not solved
    )
    return Mapped(remade, model)


__all__ = ["Analyses", "Mapped", "compile_program", "given", "optimize_program", "transform"]
