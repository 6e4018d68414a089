"""Folding a deep band: more than three perfectly nested ``par`` loops share hardware axes.

A GPU has three block and three thread axes, so a kernel maps a band of at most three par
loops (``mapping.space.kernels``). When a band is deeper, its two outermost loops are
folded into one linearized loop, until three remain::

    par A a { par B b { body } }   ==>   par A * B a_b { body[a := a_b / B, b := a_b % B] }

The folded loop is then mapped like any other (its threads, blocks, points and axis are
decisions of the model), so ``a`` and ``b`` share one hardware axis, ``b`` fastest. It is
an exact rewrite: par loops are race free (``analyze`` proves it), so the iterations may run
in any order, and ``a_b`` runs over exactly the pairs (a, b) of the original.

It applies where ``B`` is a number (after binding: ``a_b / B`` must be quasi-affine) and
neither extent depends on the other loop's index. Where it does not (sizes left symbolic:
``a * B + b`` is not affine), four or more loops remain and only three get hardware axes;
the others run inside each thread. Which three is then chosen so that memory is read along
rows: the band is *reordered* so that the loops indexing the last (contiguous) dimension of
some access come first, then the innermost ones, and the rest run inside each thread::

    par A a { par B b { par C c { par D d { O[a, b, c, d] = I[a, b, c, d] } } } }
    ==>   par B b { par C c { par D d { par A a { ... } } } }    (a inside each thread)

This is exact too (par loops of a band whose extents mention no index of the band may run
in any order); a band whose extents do (a triangle) keeps its order. The mapping report
names every par loop that runs inside a thread and says why.

Like register promotion these are IR rewrites that ``optimize`` applies before anything
else sees the program, so that the cost, the proof and the emitted code all see the
rewritten program (``Mapping.program``).
"""

from __future__ import annotations

from dataclasses import replace

from polymap.ir.nodes import (
    Assign,
    IBin,
    IConst,
    IndexOp,
    IVar,
    Loop,
    Program,
    Stmt,
    index_vars,
    substitute_stmt,
)
from polymap.ir.walk import loops as all_loops
from polymap.ir.walk import walk_block
from polymap.transform.registers import renumber_statements

MAX_BAND = 3


def fold_deep_bands(program: Program) -> Program:
    """``program`` with every band deeper than three par loops folded (see the module
    docstring); ``program`` itself when nothing folds."""
    taken = set(program.param_names) | {d.name for d in program.all_buffers()}
    taken |= {loop.index for loop, _ in all_loops(program)}
    changed = False

    def band_of(loop: Loop) -> list[Loop]:
        band = [loop]
        while len(band[-1].body) == 1 and isinstance(band[-1].body[0], Loop) and band[-1].body[0].is_par:
            band.append(band[-1].body[0])
        return band

    def fold(loop: Loop) -> Loop:
        nonlocal changed
        while True:
            band = band_of(loop)
            if len(band) <= MAX_BAND:
                return loop
            outer, inner = band[0], band[1]
            width = inner.extent
            if not isinstance(width, IConst) or width.value < 1 or outer.index in index_vars(inner.extent):
                reordered = _reorder(band)
                changed |= reordered is not loop
                return reordered
            name = _fresh(f"{outer.index}_{inner.index}", taken)
            taken.add(name)
            values = {
                outer.index: IBin(IndexOp.FLOORDIV, IVar(name), width),
                inner.index: IBin(IndexOp.MOD, IVar(name), width),
            }
            body = tuple(substitute_stmt(s, values) for s in inner.body)
            extent = IBin(IndexOp.MUL, outer.extent, width)
            loop = Loop(outer.kind, name, extent, body, outer.loc)
            changed = True

    def visit(block: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        out = []
        for stmt in block:
            if isinstance(stmt, Loop) and stmt.is_par:
                stmt = fold(stmt)
            elif isinstance(stmt, Loop):
                stmt = replace(stmt, body=visit(stmt.body))
            out.append(stmt)
        return tuple(out)

    folded = replace(program, body=visit(program.body))
    return renumber_statements(folded) if changed else program


def _reorder(band: list[Loop]) -> Loop:
    """The band with the three loops that get hardware axes outermost (see the module
    docstring), or its outermost loop unchanged when the order already holds or the band is
    not rectangular."""
    indices = {loop.index for loop in band}
    if any(index_vars(loop.extent) & indices for loop in band):
        return band[0]  # an extent depends on another loop of the band: the order is fixed
    contiguous = set()
    for stmt in walk_block(band[-1].body):
        if isinstance(stmt, Assign):
            for access in (stmt.target, *stmt.reads()):
                if access.indices:
                    contiguous |= index_vars(access.indices[-1]) & indices
    depth = {loop.index: k for k, loop in enumerate(band)}
    ranked = sorted(band, key=lambda loop: (loop.index not in contiguous, -depth[loop.index]))
    mapped = {loop.index for loop in ranked[:MAX_BAND]}
    order = [loop for loop in band if loop.index in mapped] + [
        loop for loop in band if loop.index not in mapped
    ]
    if [loop.index for loop in order] == [loop.index for loop in band]:
        return band[0]
    body = band[-1].body
    for loop in reversed(order):
        body = (replace(loop, body=body),)
    return body[0]


def _fresh(hint: str, taken: set[str]) -> str:
    name, k = hint, 1
    while name in taken:
        k += 1
        name = f"{hint}{k}"
    return name
