"""The rewrite of a reduction loop split into parts (``transform.split`` says which loops
qualify and shows the rewrite): the parts nest, the combine nest and, where the statements
after the loop hold a loop, their nest of their own."""

from __future__ import annotations

from dataclasses import replace

from polymap.errors import ArgumentError, InternalError
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    CmpOp,
    Compare,
    Const,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    IVar,
    Loop,
    LoopKind,
    New,
    Program,
    Read,
    Stmt,
    fold_index,
    guarded,
    substitute_stmt,
)
from polymap.ir.rename import rename_buffers
from polymap.ir.walk import fresh_name, names_in_use, walk_block
from polymap.transform.registers import renumber_statements
from polymap.transform.split import (
    Form,
    Reduction,
    Split,
    add_index,
    atomic_split_allowed,
    div_index,
    locals_used,
)
from polymap.transform.split_online import (
    online_combine,
    online_parts_body,
    read_buffers,
    setup_statements,
    touched_buffers,
)


def split_reduction(program: Program, reduction: Reduction, split: Split, *, extent: int) -> Program:
    """``program`` with ``reduction`` split as ``split`` says (``transform.split``'s docstring shows the
    rewrite); ``extent``: the loop's extent at the sizes the split was chosen for, which
    sets a blocked split's chunk."""
    if split.parts < 2:
        raise ArgumentError(f"a split has at least two parts, got {split.parts}")
    original = names_in_use(program)
    taken = set(original)  # the program's names and every name the rewrite makes

    def fresh(hint: str) -> str:
        name = fresh_name(hint, taken)
        taken.add(name)
        return name

    part = fresh(f"{reduction.index}_part")
    loop = reduction.loop
    length = loop.extent
    p = IVar(part)
    # Each part's loop has one extent for every part, and a guard keeps its iterations below
    # the loop's: a loop whose extent varies with the band would not be tiled for staging.
    if split.form is Form.CYCLIC:
        count: IndexExpr = IConst(split.parts)
        chunk_extent = div_index(add_index(length, IConst(split.parts - 1)), split.parts)
    else:
        chunk = split.chunk(extent)
        # no part where the loop runs no iteration (a negative extent): a shape is not negative
        count = fold_index(
            IBin(IndexOp.MAX, IConst(0), div_index(add_index(length, IConst(chunk - 1)), chunk))
        )
        chunk_extent = IConst(chunk)
    iteration = split.iteration(p, IVar(loop.index), extent)
    below = Compare(CmpOp.LT, IndexValue(iteration), IndexValue(length))
    target = reduction.decl
    nested = reduction.inner if split.inner else None
    if split.inner and (nested is None or split.atomic):
        raise InternalError(f"loop '{loop.index}' has no inner loop to give its partials a dimension")
    if reduction.online is not None and (split.inner or split.atomic):
        raise InternalError(f"loop '{loop.index}''s online sum splits into a combine only")
    # a partial per part and band point (not per element of the target, which may be large),
    # and per iteration of the inner loop where it runs as a par loop of the parts; where the
    # parts add atomically, a block-local one (a register of the part's thread)
    by_inner = (IVar(nested.index),) if nested is not None else ()
    element = () if split.atomic else (p, *(IVar(b.index) for b in reduction.band), *by_inner)
    first = next(s for s in walk_block(loop.body) if isinstance(s, Assign))
    if reduction.online is not None:
        online = reduction.online
        partials = {name: fresh(f"{name}_parts") for name in online.names}
        # each part declares the group and starts it where the prologue does: the maximum
        # at its start, the sums at 0 (the pair then stands for 0)
        starts = {
            id(stmt): (
                replace(
                    stmt, value=stmt.value if stmt.buffer == online.group.maximum else Const(0, stmt.loc)
                ),
            )
            for stmt in reduction.prologue
            if isinstance(stmt, Assign) and stmt.buffer in online.names
        }
        declared = [s for s in reduction.prologue if isinstance(s, New) and s.decl.name in online.names]
        uses = read_buffers((loop,), online.starts)
        setup = setup_statements(reduction.prologue, set(online.names), uses) + tuple(declared)
        partial_body = (
            *_in_order(reduction.prologue, setup, starts),
            *online_parts_body(online, loop, partials, element, iteration, below, chunk_extent),
        )
        step = fresh(f"{online.group.step}_join")
        combine_loop = Loop(
            LoopKind.SEQ, part, count, online_combine(online, partials, element, step, loop.loc), loop.loc
        )
        decls = tuple(zip(partials.values(), online.decls))
    else:
        parts_buffer = fresh(f"{reduction.target}_parts")
        updates = tuple(
            _retarget(
                guarded(substitute_stmt(s, {loop.index: iteration}), below),
                reduction.target,
                parts_buffer,
                element,
            )
            for s in (nested.body if nested is not None else loop.body)
        )
        if reduction.start is not None:
            start = reduction.start  # the prologue's start, evaluated again by the parts
        elif reduction.op in (AssignOp.MAX, AssignOp.MIN):
            start = Read(reduction.target, reduction.indices, first.loc)  # idempotent: the target's own value
        else:
            start = Const(0 if reduction.op is AssignOp.ADD else 1, first.loc)
        setup = setup_statements(reduction.prologue, {reduction.target}, read_buffers((loop,), (start,)))
        at: dict[int, tuple[Stmt, ...]] = {}
        if _changed_after_start(reduction, setup):
            # the start read where the prologue sets it, into a value of the part's own: the
            # setup after it changes what it reads (the partial's start stays next to the
            # loop, where register promotion finds it)
            value = fresh(f"{reduction.target}_start")
            (where,) = [s for s in reduction.prologue if _starts(s, reduction)]
            decl = BufferDecl(value, BufferKind.NEW, target.dtype, (), target.loc)
            at[id(where)] = (New(decl), Assign(first.name, value, (), AssignOp.SET, start, first.loc))
            start = Read(value, (), first.loc)
        init = Assign(first.name, parts_buffer, element, AssignOp.SET, start, first.loc)
        prefix = (*_in_order(reduction.prologue, setup, at), init)
        partial_body = (*prefix, replace(loop, extent=chunk_extent, body=updates))
        if nested is not None:  # the inner loop's iterations in parallel, each with its partials
            partial_body = (replace(nested, kind=LoopKind.PAR, body=partial_body),)
        combine = Assign(
            first.name,
            reduction.target,
            reduction.indices,
            reduction.op,
            Read(parts_buffer, element, first.loc),
            first.loc,
            atomic=split.atomic,
        )
        combine_loop = Loop(LoopKind.SEQ, part, count, (combine,), loop.loc)
        decls = ((parts_buffer, target),)
        if split.atomic:
            if not atomic_split_allowed(reduction, target.dtype, deterministic=False):
                raise InternalError(
                    f"loop '{loop.index}': its {reduction.op.value} into '{target.name}' has no atomic split"
                )
            local = New(BufferDecl(parts_buffer, BufferKind.NEW, target.dtype, (), target.loc))
            partial_body = (local, *partial_body, combine)  # each part adds its partial: no combine kernel
    # the parts nest's block-local buffers (the setup's, the group's, the loop's own) get
    # names of their own: the combine nest declares those of the prologue again
    partial_body = _own_locals(partial_body, original, taken, "_part")
    top = program.body[reduction.position]
    inner = _with_body(top, partial_body, len(reduction.band)) if reduction.band else None
    partials_nest = Loop(LoopKind.PAR, part, count, (inner,) if inner else partial_body, loop.loc)
    body = list(program.body)
    if split.atomic:  # the partial is block-local: no program-wide buffer, no combine
        body[reduction.position : reduction.position + 1] = [partials_nest]
        return renumber_statements(replace(program, body=tuple(body)))
    if nested is not None:
        # the inner loop outermost: a split of this combine then takes parts of it, whose
        # neighbours read neighbouring partials
        combine_loop = replace(nested, body=(combine_loop,))
    band_shape = tuple(_positive(b.extent) for b in reduction.band)
    finals: tuple[BufferDecl, ...] = ()
    if reduction.band and reduction.fissions:
        # the epilogue as a nest of its own: the combine stores each 0-d local of the
        # prologue it uses, per band point, and the epilogue's nest starts from it
        band_point = tuple(IVar(b.index) for b in reduction.band)
        used = locals_used(reduction.prologue, reduction.epilogue, loop=loop, set_before=True)
        finals = tuple(replace(decl, name=fresh(f"{decl.name}_final"), shape=band_shape) for decl in used)
        stores = tuple(
            Assign(first.name, f.name, band_point, AssignOp.SET, Read(d.name, (), first.loc), first.loc)
            for f, d in zip(finals, used)
        )
        restores = tuple(
            stmt
            for f, d in zip(finals, used)
            for stmt in (
                New(d),
                Assign(first.name, d.name, (), AssignOp.SET, Read(f.name, band_point, first.loc), first.loc),
            )
        )
        # those the epilogue uses that nothing set before it: declared again, not stored
        fresh = tuple(
            New(d) for d in locals_used(reduction.prologue, reduction.epilogue, loop=loop, set_before=False)
        )
        # the epilogue's nest declares the prologue's names again, so the combine's take names
        # of their own (the program's statements keep the names they were written with)
        combined_body = _own_locals(
            _used_locals((*reduction.prologue, combine_loop, *stores)), original, taken, "_join"
        )
        combined = _with_body(top, combined_body, len(reduction.band))
        after = _starting(reduction.epilogue, (*restores, *fresh))
        nests = [partials_nest, combined, _with_body(top, after, len(reduction.band))]
    elif reduction.band:
        around = (*reduction.prologue, combine_loop, *reduction.epilogue)
        nests = [partials_nest, _with_body(top, around, len(reduction.band))]
    else:
        one = fresh(f"{reduction.index}_join")
        nests = [partials_nest, Loop(LoopKind.PAR, one, IConst(1), (combine_loop,), loop.loc)]
    body[reduction.position : reduction.position + 1] = nests
    shape = (count, *band_shape)
    if nested is not None:
        shape += (_positive(nested.extent),)
    added = tuple(BufferDecl(name, BufferKind.NEW, decl.dtype, shape, decl.loc) for name, decl in decls)
    added += tuple(BufferDecl(f.name, BufferKind.NEW, f.dtype, f.shape, f.loc) for f in finals)
    rewritten = replace(program, buffers=(*program.buffers, *added), body=tuple(body))
    return renumber_statements(rewritten)


def _own_locals(
    block: tuple[Stmt, ...], original: set[str], taken: set[str], suffix: str
) -> tuple[Stmt, ...]:
    """``block`` with each block-local buffer it declares (at its top level or deeper) under
    a name of ``original`` (the program's: not one the rewrite made) renamed to a name not in
    ``taken`` (``name + suffix``, numbered where taken), which then holds the new names too."""
    names = {}
    for stmt in walk_block(block):
        if isinstance(stmt, New) and stmt.decl.name in original:
            names[stmt.decl.name] = fresh_name(f"{stmt.decl.name}{suffix}", taken)
            taken.add(names[stmt.decl.name])
    return rename_buffers(block, names)


def _used_locals(block: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """``block`` without the declarations at its top level of 0-d locals that none of its
    statements touches (the prologue declares the epilogue's values too: the combine nest
    keeps only those it sets or reads)."""
    touched = touched_buffers(block)
    return tuple(s for s in block if not (isinstance(s, New) and s.decl.name not in touched))


def _in_order(
    prologue: tuple[Stmt, ...], kept: tuple[Stmt, ...], replaced: dict[int, tuple[Stmt, ...]]
) -> tuple[Stmt, ...]:
    """The prologue's statements of ``kept``, and in place of those ``replaced`` names (by
    ``id``) the statements it gives, in the prologue's order: a start evaluated where the
    prologue evaluates it."""
    ids = set(map(id, kept))
    return tuple(t for s in prologue if id(s) in ids or id(s) in replaced for t in replaced.get(id(s), (s,)))


def _starts(stmt: Stmt, reduction: Reduction) -> bool:
    """Whether ``stmt`` is the prologue's assignment that starts a ``max=``/``min=`` loop."""
    return (
        reduction.start is not None
        and isinstance(stmt, Assign)
        and stmt.buffer == reduction.target
        and stmt.op is AssignOp.SET
    )


def _changed_after_start(reduction: Reduction, setup: tuple[Stmt, ...]) -> bool:
    """Whether a setup statement after the prologue's start of a ``max=``/``min=`` loop
    writes what the start reads (``b = 1; acc = b; b = 100``)."""
    if reduction.start is None:
        return False
    reads = read_buffers((), (reduction.start,))
    ids = set(map(id, setup))
    after = False
    for stmt in reduction.prologue:
        after = after or _starts(stmt, reduction)
        if after and id(stmt) in ids and isinstance(stmt, Assign) and stmt.buffer in reads:
            return True
    return False


def _starting(epilogue: tuple[Stmt, ...], start: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """The body of the epilogue's nest: ``start`` (the locals it takes from the combine)
    before ``epilogue``; or, where the epilogue is 0-d locals' statements and then one par
    loop that writes none of those locals nor anything they read, all of them at the start
    of each of the loop's iterations (each computes the same values), so that the loop joins
    the nest's band: a row's softmax or layer-norm writes then run on a thread per element,
    not on a block per row."""
    if not epilogue or not isinstance(epilogue[-1], Loop) or not epilogue[-1].is_par:
        return (*start, *epilogue)
    *before, loop = epilogue
    names = {s.decl.name for s in start if isinstance(s, New)}
    for stmt in before:
        if isinstance(stmt, New) and not stmt.decl.shape:
            names.add(stmt.decl.name)
        elif not (isinstance(stmt, Assign) and stmt.buffer in names and not stmt.indices and not stmt.atomic):
            return (*start, *epilogue)
    written = {s.buffer for s in walk_block(loop.body) if isinstance(s, Assign)}
    if written & (names | read_buffers((*start, *before))):
        return (*start, *epilogue)
    return (replace(loop, body=(*start, *before, *loop.body)),)


def _positive(extent: IndexExpr) -> IndexExpr:
    """A loop's extent as a shape: ``max(0, extent)``, unless it is a number or a size (a
    size is at least 1)."""
    if isinstance(extent, IConst):
        return IConst(max(0, extent.value))
    if isinstance(extent, IVar):
        return extent
    return IBin(IndexOp.MAX, IConst(0), extent)


def _with_body(top: Loop, body: tuple[Stmt, ...], depth: int) -> Loop:
    """The band of ``depth`` (>= 1) par loops starting at ``top`` around ``body``."""
    if depth == 1:
        return replace(top, body=body)
    return replace(top, body=(_with_body(top.body[0], body, depth - 1),))


def _retarget(stmt: Stmt, target: str, parts: str, element: tuple[IndexExpr, ...]) -> Stmt:
    """``stmt`` with its updates of ``target[idx]`` made updates of ``parts[element]`` (the
    loop's other statements as they are)."""
    if isinstance(stmt, Loop):
        return replace(stmt, body=tuple(_retarget(s, target, parts, element) for s in stmt.body))
    if not isinstance(stmt, Assign) or stmt.buffer != target:
        return stmt
    return replace(stmt, buffer=parts, indices=element)
