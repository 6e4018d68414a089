"""Proving a concrete thread mapping correct with isl (ARCHITECTURE.md, "verify").

The hardware model
------------------
A kernel (``space.kernels``) is launched once per iteration ``h`` of its host loops. Each
thread has the coordinates ``b = (blockIdx.x, .y, .z)`` and ``t = (threadIdx.x, .y, .z)``
with ``0 <= b_a < gridDim_a`` and ``0 <= t_a < blockDim_a`` as ``KernelMapping.grid_dim()``
and ``block_dim()`` give them (an axis no loop uses has extent 1). Band loop ``j`` reads
its indices from *its* axes, ``g_j = b[block_axis_j]`` and ``t_j = t[thread_axis_j]``,
runs ``0 <= s_j < S_j`` (outer band loops first) and computes::

    cyclic:  i_j = g_j T_j S_j + s_j T_j + t_j
    blocked: i_j = g_j T_j S_j + t_j S_j + s_j
    grouped: i_j = g_j T_j S_j + (s_j div V_j) T_j V_j + t_j V_j + s_j mod V_j

running the body only where ``i_j < extent_j`` when the loop has a ``guard``. The loops of
the body run as written. A statement ``S`` of the kernel is therefore executed at

    R_S = { [h, b, t, s, n] -> S[h, i, n] : the formulas, 0 <= b < gridDim, 0 <= t < blockDim,
            0 <= s < S, host and body loops in range, guarded band loops in range }

where ``n`` are the indices of S's loops inside the body. Taking ``g_j`` and ``t_j`` from
the hardware, not one pair per loop, keeps the model exact for wrong mappings too: two
loops pinned to one axis share its index, as they would in the emitted code.

Grid. A bound program launches ``grid_dim()`` blocks (from ``LoopMapping.max_extent``), so
the proof is exact for that launch. With symbolic sizes the grid must be a function of the
sizes: gridDim_a comes from the last loop on block axis ``a`` (as in ``grid_dim()``) and is
``ceil(N_j^max / (T_j S_j))``, N_j^max being extent_j maximised over the host and outer
band indices (launch invariant, like ``max_extent``). In isl no max is needed:
``0 <= b_a and exists x in nest_j : b_a T_j S_j < extent_j(x)``. Code generation must
launch that grid.

Obligations, per kernel, each the emptiness of an isl set (for every size of the context):

1. in bounds: ``R_S ; A`` inside the buffer's shape for every access ``A`` of ``S``, the
   access rebuilt without the domain restriction so that points a missing guard runs are
   checked too;
2. race free: for accesses ``A1`` of ``S1`` and ``A2`` of ``S2`` to one buffer, one a write,
   ``(R_S1 ; A1) ; (R_S2 ; A2)^-1`` relates no two hardware points of one launch (same
   ``h``) in different threads (``(b, t)`` differ). Block-local ``new`` buffers are expanded
   by their owner loops in the model, so private copies never meet;
3. exactly once: ``range(R_S) = domain(S)`` (nothing missing, nothing extra) and ``R_S``
   injective;
4. dependences (flow, anti, output of the model): the launch of an instance is the vector
   ``[c_0, h_0, .., c_{H-1}, h_{H-1}, c_H]`` (``c_d``: the rank, in the given kernel order,
   of the first kernel under the host loop or kernel at depth d), so kernels launch in the
   order given, inside the host loops. A dependence must never go backwards in launch
   order; inside one launch its source and sink must run in one thread with the source
   first in the thread's order ``(s_1 .. s_n, the body's 2d+1 schedule)``, or
   ``(the body's schedule, s_1 .. s_n)`` where the thread's points interleave.

1 and 2 run over every executed point and come first: they say what the hardware would do
wrong (fault, race) where a missing guard also makes 3 fail. A failure raises
VerificationError with the lexicographically smallest witness (sizes first).
"""

from __future__ import annotations

import islpy as isl

from polymap.errors import ArgumentError, InternalError, ProgramError, VerificationError
from polymap.ir.nodes import Program
from polymap.mapping.accesses import kernel_statements
from polymap.mapping.proof import KernelProof, Obligation, Proved, VerificationReport
from polymap.mapping.result import Mapping
from polymap.mapping.space import KernelMapping
from polymap.mapping.space import kernels as program_kernels
from polymap.mapping.staging import VECTOR_BYTES, scope_loops, stage_candidates, staged_buffers
from polymap.poly.checks import shown_address
from polymap.poly.deps import Dependence
from polymap.poly.isl_text import access_tuple, evaluate_index
from polymap.poly.model import Access, PolyModel, StatementModel, analyze
from polymap.prove_lanes import WARP, across_lanes, check_lane_shape, one_copy_per_lane, prove_lane_order
from polymap.prove_split import prove_split
from polymap.schedule.hardware import Executed, Frame, executed, frame_of, param_prefix
from polymap.schedule.shared import SharedPlan, element_of, shared_plan, shared_reads
from polymap.transform.fold import every_band_choice, fold_deep_bands
from polymap.transform.invariant_reads import hold_invariant_reads
from polymap.transform.registers import promote_accumulators
from polymap.transform.scans import replay_scans
from polymap.transform.split import atomic_split_allowed, reduction_at
from polymap.transform.split_rewrite import split_reduction

_IN, _OUT, _SET, _PARAM = isl.dim_type.in_, isl.dim_type.out, isl.dim_type.set, isl.dim_type.param
HW_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


# ----------------------------------------------------------------------- entry point


def verify(program: Program, kernels, *, context: str | None = None) -> VerificationReport:
    """Prove a mapping of ``program`` correct for every size of the context.

    ``kernels`` is a tuple of KernelMapping in launch order (one per kernel of
    ``space.kernels(program)``) or a ``Mapping``. ``context`` narrows the symbolic sizes as in
    ``analyze``. Raises VerificationError naming the kernel, loop, statement and access
    that fail with a witness point; program errors of ``analyze`` propagate unchanged."""
    if isinstance(kernels, Mapping):
        program = mapped_program(program, kernels)
        kernels = kernels.kernels
    return prove(analyze(program, context=context), tuple(kernels), context=context)


def prove(
    model: PolyModel, kernels: tuple[KernelMapping, ...], *, context: str | None = None
) -> VerificationReport:
    """``verify`` on a model already built (the pipeline passes the one it analyzed):
    ``model`` is ``analyze(program, context=context)``."""
    try:
        return _verify(model, tuple(kernels), context)
    except isl.Error as exc:
        program = model.program
        raise InternalError(
            f"isl failed while verifying the mapping of program '{program.name}': {exc}",
            **program.error_context(),
        ) from exc


def mapped_program(program: Program, mapping, *, analyze=analyze) -> Program:
    """The program a Mapping maps: ``program`` itself, or ``program`` as ``optimize``
    rewrote it (deep bands folded, accumulators in registers: ``Mapping.program``).
    ``analyze`` is passed to the register promotion (the pipeline's memo of models)."""
    if mapping.program == program:
        return program
    program = replay_scans(program, mapping.scans, context=mapping.context, analyze=analyze)
    program = replay_splits(program, mapping.splits, context=mapping.context, analyze=analyze)
    for axes in every_band_choice(program):
        folded = fold_deep_bands(program, axes=axes)
        proved = lambda p: analyze(p, context=mapping.context)  # noqa: E731
        promoted = hold_invariant_reads(promote_accumulators(folded, analyze=proved), analyze=proved)
        if mapping.program in (folded, promoted):
            return mapping.program
    return program


def replay_splits(program: Program, splits, *, context: str | None = None, analyze=analyze) -> Program:
    """``program`` with the splits a mapping made (``Mapping.splits``, in order) made again,
    each analyzed under the mapping's ``context`` and proved again (``prove_split``);
    ``program`` itself where one does not apply (then it is not the program they were made
    on, and the caller's comparison with ``Mapping.program`` fails). A split edited so that
    its proof fails is an ArgumentError."""
    done = program
    for choice in splits:
        if choice.split is None:
            continue
        if choice.position >= len(done.body):
            return program
        try:
            before = analyze(done, context=context)
            found = reduction_at(done, before, choice.position, reassociate=True)
        except ProgramError:
            return program
        if isinstance(found, str) or found.index != choice.loop:
            return program
        dtype = found.decl.dtype
        if choice.split.atomic and not atomic_split_allowed(found, dtype, deterministic=False):
            return program  # a += split atomically, given to a max= program, say
        if choice.split.inner and found.inner is None:
            return program  # split by an inner loop this program's loop does not have
        after = split_reduction(done, found, choice.split, extent=choice.extent)
        try:
            prove_split(before, analyze(after, context=context), found, choice.split, choice.extent)
        except (InternalError, ProgramError) as err:
            raise ArgumentError(
                f"the mapping's split of loop '{choice.loop}' ({choice.split.describe(choice.extent)}) does not "
                f"hold for this program: {str(err).splitlines()[0]}"
            ) from None
        done = after
    return done


def _verify(model: PolyModel, mappings: tuple[KernelMapping, ...], context: str | None) -> VerificationReport:
    program = model.program
    _check_shape(program, mappings)
    owner = {
        name: rank
        for rank, km in enumerate(mappings)
        for name in (s.name for s in kernel_statements(km.kernel))
    }
    for s in model.statements:
        if s.name not in owner:
            raise InternalError(f"{s.label} of program '{program.name}' lies in no kernel")
    keys = _launch_keys(model, mappings, owner)
    depth = max((len(km.kernel.host_loops) for km in mappings), default=0)
    done: dict[str, Executed] = {}
    proofs = []
    for rank, km in enumerate(mappings):
        check_lane_shape(model, km)
        frame = frame_of(model, km)
        mine = [s for s in model.statements if owner[s.name] == rank]
        width = max((2 * (len(s.loops) - frame.outer) + 1 for s in mine), default=1)
        ex = tuple(executed(model, frame, s, keys.get(rank, ()), depth, width) for s in mine)
        proved = _prove_in_bounds(model, frame, ex)
        proved += _prove_race_free(model, frame, ex)
        proved += _prove_exactly_once(model, frame, ex)
        done.update((e.stmt.name, e) for e in ex)
        inside = [d for d in model.dependences.items if owner[d.source] == rank and owner[d.sink] == rank]
        proved += _prove_thread_order(model, frame, done, inside)
        plan = shared_plan(model, frame, width)
        if plan is not None:
            proved += _prove_shared(model, plan, ex)
        proofs.append(KernelProof(km.kernel.name, _describe(frame), tuple(proved)))
    launch = _prove_launch_order(model, mappings, owner, done)
    return VerificationReport(program, mappings, tuple(proofs), tuple(launch), bool(model.params), context)


# ------------------------------------------------------------------ mapping shape


def _check_shape(program: Program, mappings: tuple[KernelMapping, ...]) -> None:
    """The mapping has one KernelMapping per kernel of the program, and one LoopMapping
    per band loop, in band order, with positive counts."""
    expected = program_kernels(program)
    seen: set[str] = set()
    for km in mappings:
        if not isinstance(km, KernelMapping):
            raise VerificationError(f"expected KernelMapping values, got {type(km).__name__}")
        kernel = km.kernel
        if kernel not in expected:
            raise VerificationError(
                f"{kernel.name} (band {', '.join(kernel.indices) or 'none'}) is not a kernel of program "
                f"'{program.name}'; its kernels are {', '.join(k.name for k in expected)}"
            )
        if kernel.name in seen:
            raise VerificationError(f"{kernel.name} of program '{program.name}' is mapped twice")
        seen.add(kernel.name)
        indices = tuple(lm.index for lm in km.loops)
        if indices != kernel.indices:
            raise VerificationError(
                f"{kernel.name}: the mapping gives loops ({', '.join(indices)}) but the band is "
                f"({', '.join(kernel.indices)}), outermost first"
            )
        _check_staging(program, km)
        _check_axes(km)
        for lm in km.loops:
            for what in ("threads", "seq"):
                value = getattr(lm, what)
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise VerificationError(
                        f"{kernel.name}, loop '{lm.index}': {what} must be >= 1, got {value!r}"
                    )
    missing = [k.name for k in expected if k.name not in seen]
    if missing:
        raise VerificationError(
            f"{', '.join(missing)} of program '{program.name}' {'is' if len(missing) == 1 else 'are'} not "
            "mapped: its statement instances would never run"
        )


def _check_axes(km: KernelMapping) -> None:
    """Each hardware axis of a kernel holds at most one loop's threads and one loop's
    blocks (``space.py``). Two loops on one axis would run only where their indices agree;
    refused here, before isl is asked which instances never run (with symbolic sizes and a
    grouped loop's ``s div V`` that question took isl minutes)."""
    for part, attr in (("threadIdx", "thread_axis"), ("blockIdx", "block_axis")):
        seen: dict = {}
        for lm in km.loops:
            axis = getattr(lm, attr)
            if axis in seen:
                raise VerificationError(
                    f"{km.kernel.name}: loops '{seen[axis]}' and '{lm.index}' are both on {part}.{axis.value}; "
                    f"an axis holds one loop, so the two would run only where their {part} parts agree "
                    "and the other iterations would never run"
                )
            seen[axis] = lm.index


def _check_staging(program: Program, km: KernelMapping) -> None:
    """A staging names a tileable seq loop of the kernel's body (or none), a positive tile,
    and buffers that can be staged there (``staging.stage_candidates``)."""
    staging = km.staging
    if staging is None:
        return
    name = km.kernel.name
    loops = [loop.index for loop in scope_loops(km.kernel)]
    if staging.loop is not None and staging.loop not in loops:
        raise VerificationError(
            f"{name}: the staging tiles no seq loop '{staging.loop}' of the thread body (tileable: "
            f"{', '.join(loops) or 'none'})"
        )
    if isinstance(staging.tile, bool) or not isinstance(staging.tile, int) or staging.tile < 1:
        raise VerificationError(f"{name}: the tile must be an integer >= 1, got {staging.tile!r}")
    if staging.loop is None and staging.tile != 1:
        raise VerificationError(f"{name}: staging over the whole body has one tile; its size must be 1")
    if isinstance(staging.slots, bool) or not isinstance(staging.slots, int) or staging.slots not in (1, 2):
        raise VerificationError(
            f"{name}: a staged buffer holds 1 tile or 2 (double buffering), got slots={staging.slots!r}"
        )
    if staging.loop is None and staging.slots != 1:
        raise VerificationError(
            f"{name}: staging over the whole body has one tile, so nothing to double-buffer; slots must be 1"
        )
    here = [c for c in stage_candidates(km.kernel, program) if c.loop == staging.loop]
    possible = {c.buffer for c in here}
    turnable = {c.buffer for c in here if c.transposable}
    for field in ("buffers", "transposed"):
        names = getattr(staging, field)
        if not isinstance(names, tuple) or not all(isinstance(b, str) for b in names):
            raise VerificationError(
                f"{name}: the staging's {field} must be a tuple of buffer names, got {names!r}"
            )
    for buffer in staging.transposed:
        if buffer not in staging.buffers or buffer not in turnable:
            raise VerificationError(
                f"{name}: cannot store '{buffer}' transposed: only a staged buffer whose tile's second-to-last "
                f"dimension follows a band loop can (here: {', '.join(sorted(turnable & set(staging.buffers))) or 'none'})"
            )
    for buffer in staging.buffers:
        if buffer not in possible:
            raise VerificationError(
                f"{name}: cannot stage '{buffer}' over {staging.loop and repr(staging.loop) or 'the body'}: "
                f"only buffers read there and written nowhere in the kernel, with each index a loop of the "
                f"band or the tiled loop plus an offset, can (here: {', '.join(sorted(possible)) or 'none'})"
            )
    _check_copy_vectors(program, km)


def _check_copy_vectors(program: Program, km: KernelMapping) -> None:
    """Each ``Staging.copy_vectors`` entry names a staged buffer once, with a power of two of
    at most ``VECTOR_BYTES`` of elements that divides its tile's rows (a group of a row is
    then never split between two rows); whether the vectors are aligned is proved later."""
    staging, name = km.staging, km.kernel.name
    pairs = staging.copy_vectors
    if not isinstance(pairs, tuple) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in pairs
    ):
        raise VerificationError(
            f"{name}: copy_vectors must be a tuple of (buffer, elements) pairs, got {pairs!r}"
        )
    named = [buffer for buffer, _ in pairs]
    widths = {sb.name: sb.widths[-1] for sb in staged_buffers(km, program)}
    for buffer, width in staging.copy_vectors:
        if buffer not in staging.buffers or named.count(buffer) > 1:
            raise VerificationError(
                f"{name}: copy_vectors names '{buffer}' "
                + ("twice" if buffer in staging.buffers else "which is not staged")
            )
        bytes_ = program.buffer(buffer).dtype.itemsize
        if (
            isinstance(width, bool)
            or not isinstance(width, int)
            or width < 1
            or width & (width - 1)
            or width * bytes_ > VECTOR_BYTES
            or widths[buffer] % width
        ):
            raise VerificationError(
                f"{name}: '{buffer}' cannot be copied in vectors of {width!r}: a vector is a power of two of "
                f"elements, at most {VECTOR_BYTES} bytes, dividing the tile's rows of {widths[buffer]} elements"
            )


def _launch_keys(model: PolyModel, mappings, owner: dict[str, int]) -> dict[int, tuple[int, ...]]:
    """``c_0 .. c_H`` per kernel rank: at depth d, the smallest rank among the kernels that
    share the kernel's block path ``position[:d + 1]`` (its host loop at depth d, or itself).
    Kernels without statements launch nothing and get no key."""
    paths: dict[int, tuple[int, ...]] = {}
    for s in model.statements:
        rank = owner[s.name]
        paths[rank] = s.ctx.position[: len(mappings[rank].kernel.host_loops) + 1]
    keys: dict[int, tuple[int, ...]] = {}
    for rank, path in paths.items():
        key = []
        for d in range(len(path)):
            under = sorted(r for r, p in paths.items() if p[: d + 1] == path[: d + 1])
            # kernels without statements launch nothing and may sit anywhere in between
            span = [r for r in sorted(paths) if under[0] <= r <= under[-1]]
            if under != span and d < len(path) - 1:
                listed = ", ".join(mappings[r].kernel.name for r in sorted(paths))
                raise VerificationError(
                    f"kernels listed as {listed}: the kernels inside host loop "
                    f"'{mappings[rank].kernel.host_loops[d].index}' must be listed together, in the "
                    "order they launch in each of its iterations"
                )
            key.append(under[0])
        keys[rank] = tuple(key)
    return keys


def _describe(frame: Frame) -> str:
    km = frame.mapping
    if not km.loops:
        return "serial kernel, one thread"
    loops = "; ".join(
        f"{lm.index} -> blockIdx.{lm.block_axis.value}/threadIdx.{lm.thread_axis.value}, "
        f"T={lm.threads} S={lm.seq} {lm.describe_distribution()}{'' if lm.guard else ', no guard'}"
        for lm in km.loops
    )
    block = "x".join(map(str, km.block_dim()))
    return f"grid ({', '.join(frame.grid)}) x block ({block}); {loops}"


# ---------------------------------------------------------------------- obligations


def _access_map(model: PolyModel, s: StatementModel, a: Access) -> isl.Map:
    """The access ``S[i] -> B[owner(i), e(i)]`` *not* restricted to S's domain, so that
    points a missing guard runs are checked too."""
    names, params = model.names, model.params
    env = {p: names[p] for p in params}
    for loop, d in zip(s.loops, s.dims):
        env[loop.index] = d
    buffer = _buffer(model, a)
    # a gathered index (checked at run time, not here) ranges over its whole dimension
    exprs, ranges = access_tuple(a.indices, buffer.decl.shape, env, params, lambda k: names.fresh(f"g{k}"))
    where = f" : {' and '.join(ranges)}" if ranges else ""
    return isl.Map(
        f"{param_prefix(model)}{{ {s.domain.get_tuple_name()}[{', '.join(s.dims)}] -> "
        f"{buffer.isl_name}[{', '.join(list(s.dims[: len(buffer.owner)]) + exprs)}]{where} }}"
    )


def _buffer(model: PolyModel, a: Access):
    isl_name = a.relation.get_tuple_name(_OUT)
    return next(b for b in model.buffers if b.isl_name == isl_name)


def _prove_in_bounds(model: PolyModel, frame: Frame, ex: tuple[Executed, ...]) -> list[Proved]:
    lines = []
    for e in ex:
        s = e.stmt
        for a in s.accesses:
            buffer = _buffer(model, a)
            outside = e.relation.range_map().apply_range(_access_map(model, s, a))
            outside = outside.subtract_range(buffer.in_bounds)
            if outside.is_empty():
                continue
            sizes, coords = _witness(outside.wrap(), model)
            hw, inst = coords[: len(e.labels)], coords[len(e.labels) : len(e.labels) + len(s.dims)]
            raise VerificationError(
                f"{frame.mapping.kernel.name}: {s.label} {a.verb} {a.text} outside the shape of "
                f"`{buffer.decl}`; e.g. {_sizes(sizes)}{_point(e, hw)} runs {_instance(s, inst)}, which "
                f"{a.verb} {shown_address(a, s, sizes, inst)}, outside {a.buffer}'s shape "
                f"{_shape(buffer.decl, sizes)}{_unguarded(frame)}"
            )
        # a gathered index ranges over its whole dimension in A: its value is the run's to check
        gathered = [a.text for a in s.accesses if a.gathered]
        checked = f" (the gathered index of {', '.join(gathered)} checked at run time)" if gathered else ""
        lines.append(
            Proved(
                Obligation.IN_BOUNDS,
                s.name,
                f"range(R_{s.name} ; A) inside the buffer's shape, every access A of {s.name}",
                f"{frame.mapping.kernel.name}: every access of {s.name} in bounds{checked}",
            )
        )
    return lines


def _prove_race_free(model: PolyModel, frame: Frame, ex: tuple[Executed, ...]) -> list[Proved]:
    accesses = [(e, a) for e in ex for a in e.stmt.accesses]
    touched: dict[str, bool] = {}
    atomics: set[str] = set()
    for k, (e1, a1) in enumerate(accesses):
        for e2, a2 in accesses[k:]:
            if not (a1.is_write or a2.is_write) or _buffer(model, a1) is not _buffer(model, a2):
                continue
            if a1.commutes_with(a2):  # atomic updates with one operator: any order
                atomics.add(a1.buffer)
                touched[a1.buffer] = True
                continue
            p1 = e1.relation.range_map().apply_range(_access_map(model, e1.stmt, a1))
            p2 = e2.relation.range_map().apply_range(_access_map(model, e2.stmt, a2))
            pairs = p1.apply_range(p2.reverse())
            for dim in range(frame.host):
                pairs = pairs.equate(_IN, dim, _OUT, dim)  # one launch
            pairs = one_copy_per_lane(pairs, frame, a1.buffer, _buffer(model, a1).is_local)
            # two lanes of one warp are ordered by its forks and joins: the lane-order proof
            # takes those pairs (each is a dependence), this one every other pair of threads
            _, clash = across_lanes(pairs, frame)
            touched[a1.buffer] = True
            if clash.is_empty():
                continue
            raise _race(model, frame, (e1, a1), (e2, a2), clash)
    among = ""
    if frame.mapping.lanes > 1:  # a point is a warp, or a block of several
        among = (
            " of two warps (two lanes of one warp: lane order)"
            if frame.mapping.lanes <= WARP
            else " of two blocks (two lanes of one block: lane order)"
        )
    return [
        Proved(
            Obligation.RACE_FREE,
            b,
            f"(R_S1 ; A1) ; (R_S2 ; A2)^-1 on {b}, one launch, two threads" + among,
            f"{frame.mapping.kernel.name}: no race between threads on {b}"
            + among
            + (
                " but between atomic updates that commute (one operator, or += and -=)"
                if b in atomics
                else ""
            ),
        )
        for b in touched
    ]


def _race(model, frame, first, second, clash: isl.Map) -> VerificationError:
    (e1, a1), (e2, a2) = first, second
    sizes, coords = _witness(clash.wrap(), model)
    n1 = len(e1.labels) + len(e1.stmt.dims)
    hw1, x = coords[: len(e1.labels)], coords[len(e1.labels) : n1]
    hw2, y = coords[n1 : n1 + len(e2.labels)], coords[n1 + len(e2.labels) :]
    if a1 is a2:
        what = f"{e1.stmt.label} {a1.verb} {a1.text} in two threads at once"
    else:
        what = f"{e1.stmt.label} {a1.verb} {a1.text} and {e2.stmt.label} {a2.verb} {a2.text} in two threads at once"
    return VerificationError(
        f"{frame.mapping.kernel.name}: race between threads: {what}; e.g. "
        f"{_sizes(sizes)}thread ({_point(e1, hw1)}) runs {_instance(e1.stmt, x)} and {a1.verb} "
        f"{shown_address(a1, e1.stmt, sizes, x)}, thread ({_point(e2, hw2)}) runs {_instance(e2.stmt, y)} and "
        f"{a2.verb} {shown_address(a2, e2.stmt, sizes, y)}{_outside(e1, sizes, x)}{_outside(e2, sizes, y)}{_unguarded(frame)}"
    )


def _prove_exactly_once(model: PolyModel, frame: Frame, ex: tuple[Executed, ...]) -> list[Proved]:
    name = frame.mapping.kernel.name
    lines = []
    for e in ex:
        s, r = e.stmt, e.relation
        ran = r.range()
        extra = ran.subtract(s.domain)
        if not extra.is_empty():
            sizes, coords = _witness(r.intersect_range(extra).wrap(), model)
            hw, inst = coords[: len(e.labels)], coords[len(e.labels) :]
            raise VerificationError(
                f"{name}: {s.label} is run outside its domain; e.g. {_sizes(sizes)}{_point(e, hw)} runs "
                f"{_instance(s, inst)}, which is not an instance of {s.name}{_unguarded(frame)}"
            )
        missing = s.domain.subtract(ran)
        if not missing.is_empty():
            sizes, inst = _witness(missing, model)
            raise VerificationError(
                f"{name}: {s.label}: instance {_instance(s, inst)} is never run{_with(sizes)}; the mapping "
                f"covers {_coverage(frame)}"
            )
        twice = r.range_map().apply_range(r.range_map().reverse())
        twice = twice.subtract(isl.Map.identity(twice.get_space()))
        if not twice.is_empty():
            sizes, coords = _witness(twice.wrap(), model)
            n = len(e.labels)
            raise VerificationError(
                f"{name}: {s.label}: instance {_instance(s, coords[n : n + len(s.dims)])} is run twice{_with(sizes)}, "
                f"by ({_point(e, coords[:n])}) and by ({_point(e, coords[n + len(s.dims) : 2 * n + len(s.dims)])})"
            )
        lines.append(
            Proved(
                Obligation.EXACTLY_ONCE,
                s.name,
                f"range(R_{s.name}) = domain({s.name}), R_{s.name} injective",
                f"{name}: every instance of {s.name} executed exactly once",
            )
        )
    return lines


def _prove_thread_order(model: PolyModel, frame: Frame, executed, deps: list[Dependence]) -> list[Proved]:
    """Dependences inside one launch: source and sink in one thread, source first."""
    lines = []
    name = frame.mapping.kernel.name
    for dep in deps:
        e1, e2 = executed[dep.source], executed[dep.sink]
        same_launch = dep.relation.intersect(e1.launch.apply_range(e2.launch.reverse()))
        if same_launch.is_empty():
            continue
        pairs = (
            e1.relation.range_map().apply_range(same_launch).apply_range(e2.relation.range_map().reverse())
        )
        one_thread = pairs
        for dim in range(frame.host, frame.host + 6):
            one_thread = one_thread.equate(_IN, dim, _OUT, dim)
        lanes, across = across_lanes(pairs, frame)
        if not across.is_empty():
            raise _dep_error(model, name, dep, e1, e2, across, "runs them in different threads of one launch")
        if not lanes.is_empty():

            def error(bad, what, dep=dep, e1=e1, e2=e2):
                return _dep_error(model, name, dep, e1, e2, bad, what)

            lines.append(prove_lane_order(model, frame, dep, e1, e2, lanes, error))
            if one_thread.is_empty():
                continue
        late = one_thread.intersect(e1.time.lex_ge_map(e2.time))
        if not late.is_empty():
            raise _dep_error(
                model, name, dep, e1, e2, late, "runs the sink no later than the source in its thread"
            )
        relation = f"R_{dep.source} ; dep ; R_{dep.sink}^-1 in one launch: one thread, source earlier"
        lines.append(
            Proved(
                Obligation.DEPENDENCE_KEPT,
                _dep_name(dep),
                relation,
                f"{name}: {_dep_name(dep)} kept in one thread, source first",
            )
        )
    return lines


def _prove_shared(model: PolyModel, plan: SharedPlan, ex: tuple[Executed, ...]) -> list[Proved]:
    """Staged reads get the value the program read (``shared.py``), and no barrier is missing:

    * coverage: every element a statement reads from a tile is copied for that block and
      tile by some thread, earlier in time than the read;
    * barriers: any two accesses to one shared element from different threads of a block,
      one of them a copy (a write), have a barrier of the block between them in time.

    * last writer: no copy writes the element between the copy a read needs and the read
      (a double buffer's slot is written again two tiles later: not before the read);
    * asynchronous copies (a double-buffered kernel's ``cp.async``): a copy's write lands at
      any time until the thread's next barrier, so an access after it, in its own thread
      too, needs a barrier between.

    Together they make a read see its own tile's copy: the value in place at the read's time
    is the last write before it (the barriers order the threads' accesses as their times),
    and that write is the copy of the read's own element and tile."""
    name = plan.frame.mapping.kernel.name
    asynchronous = plan.frame.mapping.staging.double_buffered
    lines = []
    reads = [(e, copy, m) for e in ex for copy, m in shared_reads(model, plan, e.stmt, e.relation, e.dims)]
    for e, copy, m in reads:
        missing = m.range().subtract(copy.relation.range())
        if not missing.is_empty():
            sizes, coords = _witness(missing, model)
            raise VerificationError(
                f"{name}: {e.stmt.label} reads {copy.buffer.name} from shared memory, but no thread copies "
                f"the element it needs{_with(sizes)}: copy instance {coords} is never run"
            )
        needs = m.apply_range(copy.relation.range_map().reverse())  # read -> the copy it needs
        late = needs.intersect(e.time.lex_le_map(copy.time))
        if not late.is_empty():
            sizes, _ = _witness(late.wrap(), model)
            raise VerificationError(
                f"{name}: {e.stmt.label} reads {copy.buffer.name}'s shared tile before the copy of its "
                f"element{_with(sizes)}"
            )
        _prove_last_writer(model, name, e, copy, m, needs)
        buffer, reader = copy.buffer.name, e.stmt.name
        relation = (
            f"range(read of {reader} -> tile element) inside range(Copy_{buffer}), the copy earlier, "
            "and no other copy of the element between them"
        )
        text = (
            f"{name}: every read of {buffer} by {reader} finds its element copied for its tile, before it, "
            "and not overwritten since"
        )
        lines.append(Proved(Obligation.STAGING_COVERAGE, f"{buffer} read by {reader}", relation, text))
    for copy in plan.copies:
        # the copy against itself (two threads writing one element) and against every read of its tile
        others = [(copy.writes, copy.time, f"Copy_{copy.buffer.name}", "writes")]
        others += [
            (m.apply_range(element_of(copy)), e.time, e.stmt.name, "reads") for e, c, m in reads if c is copy
        ]
        for access, time, other, verb in others:
            pairs = copy.writes.apply_range(access.reverse())
            cross = _across_threads(pairs, plan.frame)
            separated = _separated(plan, copy.time, time)
            unsafe = cross.subtract(separated).subtract(_separated(plan, time, copy.time).reverse())
            where = "in another thread of the block"
            if unsafe.is_empty() and asynchronous:
                # in flight until the next barrier: any later access, its own thread's too
                later = copy.time.flatten_domain().lex_lt_map(time.flatten_domain())
                unsafe = pairs.flatten_domain().flatten_range().intersect(later).subtract(separated)
                where = "while the asynchronous copy may still be in flight"
            if not unsafe.is_empty():
                sizes, coords = _witness(unsafe.wrap(), model)
                raise VerificationError(
                    f"{name}: a barrier is missing: Copy_{copy.buffer.name} writes {copy.buffer.name}'s shared "
                    f"tile and {other} {verb} the same element {where} with no "
                    f"__syncthreads() between them{_with(sizes)} (hardware points {coords})"
                )
        buffer = copy.buffer.name
        relation = f"Copy_{buffer} writes x other threads' accesses to the tile, less barrier-separated pairs"
        text = (
            f"{name}: a barrier separates every copy into {buffer}'s tile from the other threads' "
            "accesses to it"
        )
        if asynchronous:
            relation += f"; Copy_{buffer} writes x every later access, less barrier-separated pairs"
            text += ", and every asynchronous copy from any later access (the copy waited for first)"
        lines.append(Proved(Obligation.BARRIERS, buffer, relation, text))
    for copy in plan.copies:
        lines.append(_prove_tile_in_bounds(model, name, copy, [m for _, c, m in reads if c is copy]))
    for copy in plan.copies:
        if copy.vectors is not None:
            lines.append(_prove_vector_copy(model, name, copy))
    return lines


def _prove_tile_in_bounds(model: PolyModel, name: str, copy, reads: list[isl.Map]) -> Proved:
    """Every element a copy writes into a tile, and every element a statement reads from it,
    lies inside the shared array as declared: ``[slots][padded_0]..`` (the slot only where
    double-buffered), after the launch's and the block's coordinates."""
    elements = copy.writes.range()
    for m in reads:
        elements = elements.union(m.apply_range(element_of(copy)).range())
    space = elements.get_space()
    dims = [f"pm_tile{k}" for k in range(space.dim(_SET))]
    params = [space.get_dim_name(_PARAM, k) for k in range(space.dim(_PARAM))]
    sb = copy.buffer
    extents = ([sb.slots] if sb.slots > 1 else []) + list(sb.padded)
    lead = len(dims) - len(extents)
    inside = [f"0 <= {d} < {n}" for d, n in zip(dims[lead:], extents)]
    box = isl.Set(
        f"[{', '.join(params)}] -> {{ {space.get_tuple_name(_SET)}[{', '.join(dims)}] : {' and '.join(inside)} }}"
    )
    outside = elements.subtract(box)
    if not outside.is_empty():
        sizes, coords = _witness(outside, model)
        declared = "".join(f"[{n}]" for n in extents)
        raise VerificationError(
            f"{name}: {sb.name}'s tile is declared {declared}, but element {coords} of it is written or "
            f"read{_with(sizes)}: outside the array"
        )
    relation = f"range(Copy_{sb.name} writes) and the tile's reads inside the declared {sb.name}_sh box"
    text = f"{name}: every access to {sb.name}'s tile in shared memory is inside the array as declared"
    return Proved(Obligation.IN_BOUNDS, f"{sb.name}_sh", relation, text)


def _prove_last_writer(model: PolyModel, name: str, e: Executed, copy, m: isl.Map, needs: isl.Map) -> None:
    """No copy instance writes the element a read needs between the copy it needs (``needs``:
    read -> that copy, as run) and the read, in time: in a double buffer, the copy two tiles
    later into the same slot must come after the read."""
    element = m.apply_range(element_of(copy))  # read -> the shared element
    writers = element.apply_range(copy.writes.reverse())  # read -> every copy writing it
    others = writers.subtract(needs)
    flat_needs = needs.flatten_domain().flatten_range()
    copy_time, read_time = copy.time.flatten_domain(), e.time.flatten_domain()
    after_needed = flat_needs.apply_range(copy_time.lex_lt_map(copy_time))  # read -> copies after its own
    before_read = read_time.lex_gt_map(copy_time)  # read -> copies earlier than it
    between = others.flatten_domain().flatten_range().intersect(after_needed).intersect(before_read)
    if not between.is_empty():
        sizes, coords = _witness(between.wrap(), model)
        raise VerificationError(
            f"{name}: {e.stmt.label} reads {copy.buffer.name}'s shared tile after another copy overwrote the "
            f"element its own tile's copy put there{_with(sizes)} (hardware points {coords})"
        )


def _prove_vector_copy(model: PolyModel, name: str, copy) -> Proved:
    """A copy in vectors of ``w`` elements (``shared.CopyVectors``) moves what the
    element-wise copy moves, with aligned vectors:

    * aligned: the first lane of every group that has a lane in the tile reads an element
      whose index in the buffer's row is a multiple of ``w`` (in a row of a multiple of
      ``w``, which the launch tests with the pointer's alignment, its address is aligned);
    * whole: where the row's length is a multiple of ``w`` (the launch's test), every lane
      of such a group is in the tile, so the vector reads no element the copy does not;
    * a vector store into shared memory (``StagedBuffer.stores_vectors``) starts at a
      multiple of ``w`` in a row of a multiple of ``w``, its lanes neighbours there."""
    vectors, buffer = copy.vectors, copy.buffer.name
    width = vectors.width

    def off_multiple(where: isl.Set) -> isl.Set:  # the points whose last index is no multiple of w
        last = where.dim(_SET) - 1
        space = where.get_space()
        names = [f"pm_vector{k}" for k in range(where.dim(_SET))]
        params = [space.get_dim_name(_PARAM, k) for k in range(where.dim(_PARAM))]
        tuple_name = where.get_tuple_name()
        bad = isl.Set(
            f"[{', '.join(params)}] -> {{ {tuple_name}[{', '.join(names)}] : {names[last]} mod {width} != 0 }}"
        )
        return where.intersect(bad)

    firsts = vectors.domain.apply(vectors.reads[0])
    misaligned = off_multiple(firsts)
    if not misaligned.is_empty():
        sizes, coords = _witness(misaligned, model)
        raise VerificationError(
            f"{name}: the copy of {buffer}'s tile loads {width} elements at once, but a vector would start at "
            f"{buffer}{coords}{_with(sizes)}, whose index in the row is not a multiple of {width}: the load "
            "would be misaligned"
        )
    whole = vectors.domain.intersect_params(vectors.condition)
    for e, groups in enumerate(vectors.inside):
        outside = whole.subtract(groups)
        if not outside.is_empty():
            sizes, coords = _witness(outside, model)
            raise VerificationError(
                f"{name}: the copy of {buffer}'s tile loads {width} elements at once, but lane {e} of group "
                f"{coords}{_with(sizes)} is outside the tile: the vector would read an element the copy must not"
            )
    if copy.buffer.stores_vectors:
        starts = vectors.domain.apply(vectors.lanes[0].apply_range(element_of(copy)))
        apart = off_multiple(starts)
        if not apart.is_empty() or copy.buffer.padded[-1] % width:
            raise VerificationError(
                f"{name}: the copy stores {width} elements at once into {buffer}'s tile, but not at a multiple "
                f"of {width} in a row of a multiple of {width}"
            )
    relation = (
        f"range(CopyV_{buffer} lane 0 -> {buffer}) has rows' indices 0 mod {width}; "
        f"domain(CopyV_{buffer}) with the row a multiple of {width} inside every lane's preimage of Copy_{buffer}"
    )
    text = (
        f"{name}: the copy of {buffer}'s tile loads {width} elements at once, each vector aligned and inside "
        f"the tile where the row's length is a multiple of {width} (else one element at a time)"
    )
    return Proved(Obligation.VECTOR_COPIES, buffer, relation, text)


def _across_threads(pairs: isl.Map, frame: Frame) -> isl.Map:
    """Pairs of hardware points (flattened) in different threads; the shared element
    already names the launch and the block."""
    flat = pairs.flatten_domain().flatten_range()
    same = flat
    for dim in range(frame.host + 3, frame.host + 6):
        same = same.equate(_IN, dim, _OUT, dim)
    return flat.subtract(same)


def _separated(plan: SharedPlan, t1: isl.Map, t2: isl.Map) -> isl.Map:
    """Pairs (x, y) of hardware points (flattened) such that a barrier of their block runs
    after x and before y."""
    h = plan.frame.host
    x_time, y_time = t1.flatten_domain(), t2.flatten_domain()
    out = isl.Map.empty(
        isl.Space.map_from_domain_and_range(x_time.domain().get_space(), y_time.domain().get_space())
    )
    for barrier in plan.barriers:
        before = x_time.lex_lt_map(barrier.time)  # x -> z: time(x) < time(z)
        after = barrier.time.lex_lt_map(y_time)  # z -> y: time(z) < time(y)
        for dim in range(h + 3):  # z of the same launch and block: its coordinates start with h, b
            before = before.equate(_IN, dim, _OUT, dim)
            after = after.equate(_IN, dim, _OUT, dim)
        out = out.union(before.apply_range(after))
    return out


def _dep_error(model, name, dep, e1, e2, pairs: isl.Map, what: str) -> VerificationError:
    sizes, coords = _witness(pairs.wrap(), model)
    n1 = len(e1.labels) + len(e1.stmt.dims)
    x, y = coords[len(e1.labels) : n1], coords[n1 + len(e2.labels) :]
    return VerificationError(
        f"{name}: {_dep_name(dep)} is broken: the mapping {what}; e.g. {_sizes(sizes)}"
        f"{_instance(e1.stmt, x)} on ({_point(e1, coords[: len(e1.labels)])}) and "
        f"{_instance(e2.stmt, y)} on ({_point(e2, coords[n1 : n1 + len(e2.labels)])})"
    )


def _prove_launch_order(model: PolyModel, mappings, owner, executed) -> list[Proved]:
    """A dependence never goes from a later launch to an earlier one."""
    lines = []
    for dep in model.dependences.items:
        e1, e2 = executed[dep.source], executed[dep.sink]
        across = dep.relation.subtract(dep.relation.intersect(e1.launch.apply_range(e2.launch.reverse())))
        if across.is_empty():
            continue
        k1, k2 = mappings[owner[dep.source]].kernel, mappings[owner[dep.sink]].kernel
        back = dep.relation.intersect(e1.launch.lex_gt_map(e2.launch))
        if not back.is_empty():
            sizes, coords = _witness(back.wrap(), model)
            x, y = coords[: len(e1.stmt.dims)], coords[len(e1.stmt.dims) :]
            raise VerificationError(
                f"launch order breaks {_dep_name(dep)}: the sink runs in an earlier launch than the source; "
                f"e.g. {_sizes(sizes)}{_instance(e1.stmt, x)} runs in {k1.name}{_host(k1, x)} and "
                f"{_instance(e2.stmt, y)} in {k2.name}{_host(k2, y)}, launched before it "
                f"(kernels listed as {', '.join(km.kernel.name for km in mappings)})"
            )
        lines.append(
            Proved(
                Obligation.LAUNCH_ORDER,
                _dep_name(dep),
                f"dep across launches: launch({dep.source}) <<= launch({dep.sink})",
                f"launch order: {_dep_name(dep)} from {k1.name} to {k2.name} keeps the source's launch first",
            )
        )
    return lines


# ------------------------------------------------------------------------ messages


def _witness(obj: isl.Set, model: PolyModel) -> tuple[dict[str, int], list[int]]:
    """The lexicographically smallest point, sizes first: (sizes by user name, coordinates)."""
    flat = obj.flatten()
    n = flat.dim(_PARAM)
    sizes = [model.names.user(flat.get_dim_name(_PARAM, k)) for k in range(n)]
    flat = flat.move_dims(_SET, 0, _PARAM, 0, n)
    point = flat.lexmin().sample_point()
    if point.is_void():
        point = flat.sample_point()
    values = [int(point.get_coordinate_val(_SET, k).to_python()) for k in range(flat.dim(_SET))]
    return dict(zip(sizes, values[:n])), values[n:]


def _sizes(sizes: dict[str, int]) -> str:
    return f"with {', '.join(f'{k} = {v}' for k, v in sizes.items())}: " if sizes else ""


def _with(sizes: dict[str, int]) -> str:
    return f" (with {', '.join(f'{k} = {v}' for k, v in sizes.items())})" if sizes else ""


def _point(e: Executed, coords) -> str:
    shown = [
        f"{label} = {v}"
        for k, (label, v) in enumerate(zip(e.labels, coords))
        if k >= len(e.frame.hw) or e.frame.shown(k)
    ]
    return ", ".join(shown) or "the single thread"


def _instance(s: StatementModel, coords) -> str:
    if not s.dims:
        return s.name
    return f"{s.name}[{', '.join(f'{n} = {v}' for n, v in zip(s.ctx.indices, coords))}]"


def _shape(decl, sizes: dict[str, int]) -> str:
    return f"[{', '.join(str(evaluate_index(e, sizes)) for e in decl.shape)}]"


def _outside(e: Executed, sizes: dict[str, int], coords) -> str:
    """A note when a witness instance lies outside its statement's domain (a missing guard)."""
    env = dict(sizes)
    for loop, v in zip(e.stmt.loops, coords):
        if not 0 <= v < evaluate_index(loop.extent, env):
            return f" ({_instance(e.stmt, coords)} is outside {e.stmt.name}'s domain: {loop.index} >= {loop.extent})"
        env[loop.index] = v
    return ""


def _host(kernel, coords) -> str:
    h = len(kernel.host_loops)
    if not h:
        return ""
    return " at " + ", ".join(f"{loop.index} = {v}" for loop, v in zip(kernel.host_loops, coords[:h]))


def _unguarded(frame: Frame) -> str:
    loose = [lm.index for lm in frame.mapping.loops if not lm.guard]
    if not loose:
        return ""
    return f" (loop{'s' if len(loose) > 1 else ''} {', '.join(map(repr, loose))} without a guard)"


def _coverage(frame: Frame) -> str:
    km = frame.mapping
    if not km.loops:
        return "one thread"
    parts = []
    for lm in km.loops:
        axis = lm.block_axis.position
        grid = frame.grid[axis]
        parts.append(
            f"loop '{lm.index}' (extent {lm.extent}) on gridDim.{lm.block_axis.value} = {grid} x "
            f"blockDim.{lm.thread_axis.value} = {km.block_dim()[lm.thread_axis.position]} x seq {lm.seq}"
            + (f", max_extent {lm.max_extent}" if grid.isdigit() else "")
        )
    return "; ".join(parts)


def _dep_name(dep: Dependence) -> str:
    return f"{dep.kind.value} dependence {dep.source} -> {dep.sink} on {dep.buffer}"


__all__ = ["KernelProof", "Obligation", "Proved", "VerificationReport", "prove", "verify"]
