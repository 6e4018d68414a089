"""Buffers renamed in a block of statements: a rewrite that runs a band's statements in a
second nest (``transform.split``) gives the block-local buffers they declare names of their
own, since a program declares each name once."""

from __future__ import annotations

from dataclasses import replace

from polymap.ir.nodes import Anchor, Assign, Gather, Loop, New, Read, Stmt, map_values


def rename_buffers(block: tuple[Stmt, ...], names: dict[str, str]) -> tuple[Stmt, ...]:
    """``block`` with every declaration, write and read (a gather's index too) of a buffer
    in ``names`` made one of ``names[buffer]``."""
    return tuple(_stmt(stmt, names) for stmt in block)


def _stmt(stmt: Stmt, names: dict[str, str]) -> Stmt:
    if isinstance(stmt, Loop):
        return replace(stmt, body=rename_buffers(stmt.body, names))
    if isinstance(stmt, New):
        return New(replace(stmt.decl, name=names.get(stmt.decl.name, stmt.decl.name)))

    def value(e):
        return None if e is None else map_values(e, lambda leaf: _read(leaf, names))

    if isinstance(stmt, Anchor):
        return replace(
            stmt, value=value(stmt.value), guard=value(stmt.guard), predicate=value(stmt.predicate)
        )
    assert isinstance(stmt, Assign)
    return replace(
        stmt,
        buffer=names.get(stmt.buffer, stmt.buffer),
        indices=_indices(stmt.indices, names),  # a scatter's index may be read (``h[p] += ..``)
        value=value(stmt.value),
        guard=value(stmt.guard),
        predicate=value(stmt.predicate),
    )


def _read(leaf, names: dict[str, str]):
    if not isinstance(leaf, Read):
        return leaf
    return Read(names.get(leaf.buffer, leaf.buffer), _indices(leaf.indices, names), leaf.loc)


def _indices(indices: tuple, names: dict[str, str]) -> tuple:
    """``indices`` with each gathered index's read renamed."""
    return tuple(Gather(_read(i.source, names)) if isinstance(i, Gather) else i for i in indices)
