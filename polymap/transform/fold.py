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
the others run inside each thread. The band is then *reordered* so that the three loops
that get axes come first, and the rest run inside each thread::

    par A a { par B b { par C c { par D d { O[a, b, c, d] = I[a, b, c, d] } } } }
    ==>   par B b { par C c { par D d { par A a { ... } } } }    (a inside each thread)

This is exact too (par loops of a band whose extents mention no index of the band may run
in any order); a band whose extents do (a triangle) keeps its order. Which three loops get
the axes is a choice of the pipeline (``pipeline.choose_band_axes``): each choice is mapped
by SCIP and the cheapest taken; ``deep_bands`` lists the bands and their choices, ``axes``
passes the chosen ones in. Without a choice, a band gets ``rule_axes``: the loops indexing
the last (contiguous) dimension of some access first, then the innermost ones. The mapping
report names every par loop that runs inside a thread and says why.

Like register promotion these are IR rewrites that ``optimize`` applies before anything
else sees the program, so that the cost, the proof and the emitted code all see the
rewritten program (``Mapping.program``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations, product

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
from polymap.ir.walk import fresh_name, names_in_use, walk_block
from polymap.transform.registers import renumber_statements

MAX_BAND = 3


@dataclass(frozen=True, slots=True)
class DeepBand:
    """A band that stays deeper than three par loops after folding: the ``number``-th such
    band in program order, its loop indices (outermost first), and every choice of the three
    loops that get hardware axes (``rule_axes``'s choice first); a triangle has one choice,
    its first three loops, since its order is fixed."""

    number: int
    indices: tuple[str, ...]
    choices: tuple[frozenset[str], ...]


def fold_deep_bands(program: Program, *, axes: dict[int, frozenset[str]] | None = None) -> Program:
    """``program`` with every band deeper than three par loops folded (see the module
    docstring), and each band that stays deeper reordered so that the loops in
    ``axes[number]`` (by default ``rule_axes``) come first; ``program`` itself when nothing
    changes."""
    return _fold(program, axes or {}, None)


def deep_bands(program: Program) -> tuple[DeepBand, ...]:
    """The bands of ``program`` that stay deeper than three par loops after folding."""
    found: list[DeepBand] = []
    _fold(program, {}, found)
    return tuple(found)


def every_band_choice(program: Program):
    """Every combination of choices for the deep bands of ``program`` (``axes`` arguments of
    ``fold_deep_bands``), the rule's first: the rewrites ``optimize`` may have made."""
    bands = deep_bands(program)
    for picked in product(*(band.choices for band in bands)):
        yield {band.number: axes for band, axes in zip(bands, picked)}


def _fold(program: Program, axes: dict[int, frozenset[str]], found: list[DeepBand] | None) -> Program:
    taken = names_in_use(program)
    changed = False
    count = 0

    def band_of(loop: Loop) -> list[Loop]:
        band = [loop]
        while len(band[-1].body) == 1 and isinstance(band[-1].body[0], Loop) and band[-1].body[0].is_par:
            band.append(band[-1].body[0])
        return band

    def fold(loop: Loop) -> Loop:
        nonlocal changed, count
        while True:
            band = band_of(loop)
            if len(band) <= MAX_BAND:
                return loop
            outer, inner = band[0], band[1]
            width = inner.extent
            if not isinstance(width, IConst) or width.value < 1 or outer.index in index_vars(inner.extent):
                number, count = count, count + 1
                if found is not None:
                    found.append(DeepBand(number, tuple(b.index for b in band), _choices(band)))
                reordered = _reorder(band, axes.get(number, rule_axes(band)))
                changed |= reordered is not loop
                return reordered
            name = fresh_name(f"{outer.index}_{inner.index}", taken)
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


def _fixed_order(band: list[Loop]) -> bool:
    """Whether an extent of the band depends on another loop of it (a triangle)."""
    indices = {loop.index for loop in band}
    return any(index_vars(loop.extent) & indices for loop in band)


def _choices(band: list[Loop]) -> tuple[frozenset[str], ...]:
    first = rule_axes(band)
    if _fixed_order(band):
        return (first,)
    others = [frozenset(c) for c in combinations([loop.index for loop in band], MAX_BAND)]
    return (first, *[c for c in others if c != first])


def rule_axes(band: list[Loop]) -> frozenset[str]:
    """The three loops a rule gives hardware axes: those indexing the last (contiguous)
    dimension of some access, then the innermost; a triangle's first three (its order is
    fixed)."""
    if _fixed_order(band):
        return frozenset(loop.index for loop in band[:MAX_BAND])
    indices = {loop.index for loop in band}
    contiguous = set()
    for stmt in walk_block(band[-1].body):
        if isinstance(stmt, Assign):
            for access in (stmt.target, *stmt.reads()):
                if access.indices:
                    contiguous |= index_vars(access.indices[-1]) & indices
    depth = {loop.index: k for k, loop in enumerate(band)}
    ranked = sorted(band, key=lambda loop: (loop.index not in contiguous, -depth[loop.index]))
    return frozenset(loop.index for loop in ranked[:MAX_BAND])


def _reorder(band: list[Loop], mapped: frozenset[str]) -> Loop:
    """The band with the loops in ``mapped`` outermost, each group in the band's order, or
    its outermost loop unchanged when that is the order already or the band's order is
    fixed (a triangle)."""
    if _fixed_order(band):
        return band[0]
    order = [loop for loop in band if loop.index in mapped] + [
        loop for loop in band if loop.index not in mapped
    ]
    if [loop.index for loop in order] == [loop.index for loop in band]:
        return band[0]
    body = band[-1].body
    for loop in reversed(order):
        body = (replace(loop, body=body),)
    return body[0]
