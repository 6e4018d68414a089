"""Walking a program: every statement with the loops around it and its textual position.

The polyhedral model, the reference executor and code generation all need the same view
of a statement: its enclosing loops (outermost first), the block-local buffers in scope,
and its position in the 2d+1 textual schedule. This module computes it once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from polymap.ir.nodes import Anchor, Assign, BufferDecl, Loop, New, Program, Statement, Stmt


@dataclass(frozen=True, slots=True)
class LocalBuffer:
    """A block-local ``new`` buffer and the loops around its declaration.

    Each iteration of ``loops`` owns a private copy, so in the polyhedral model the buffer
    is expanded by those loop indices: ``T[i, j, *shape]`` for a ``new T`` inside loops i, j."""

    decl: BufferDecl
    loops: tuple[Loop, ...]

    @property
    def owner_indices(self) -> tuple[str, ...]:
        return tuple(loop.index for loop in self.loops)


@dataclass(frozen=True, slots=True)
class StatementContext:
    """A statement in place: ``loops`` enclose it (outermost first); ``position[k]`` is its
    block position at depth k, so the textual schedule is
    ``[position[0], i_0, position[1], i_1, ..., position[n]]``."""

    stmt: Statement
    loops: tuple[Loop, ...]
    position: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.stmt.name

    @property
    def indices(self) -> tuple[str, ...]:
        return tuple(loop.index for loop in self.loops)


def statements(program: Program) -> Iterator[StatementContext]:
    """Every Assign and Anchor in textual order."""

    def visit(block: tuple[Stmt, ...], loops: tuple[Loop, ...], prefix: tuple[int, ...]):
        for pos, stmt in enumerate(block):
            if isinstance(stmt, (Assign, Anchor)):
                yield StatementContext(stmt, loops, prefix + (pos,))
            elif isinstance(stmt, Loop):
                yield from visit(stmt.body, loops + (stmt,), prefix + (pos,))

    yield from visit(program.body, (), ())


def local_buffers(program: Program) -> dict[str, LocalBuffer]:
    """Every block-local ``new`` buffer by name, with the loops around its declaration."""
    found: dict[str, LocalBuffer] = {}

    def visit(block: tuple[Stmt, ...], loops: tuple[Loop, ...]) -> None:
        for stmt in block:
            if isinstance(stmt, New):
                found[stmt.decl.name] = LocalBuffer(stmt.decl, loops)
            elif isinstance(stmt, Loop):
                visit(stmt.body, loops + (stmt,))

    visit(program.body, ())
    return found


def loops(program: Program) -> Iterator[tuple[Loop, tuple[Loop, ...]]]:
    """Every loop with the loops enclosing it (outermost first), in textual order."""

    def visit(block: tuple[Stmt, ...], outer: tuple[Loop, ...]):
        for stmt in block:
            if isinstance(stmt, Loop):
                yield stmt, outer
                yield from visit(stmt.body, outer + (stmt,))

    yield from visit(program.body, ())


def walk_block(block: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of ``block`` and of the loops inside it, in textual order."""
    for stmt in block:
        yield stmt
        if isinstance(stmt, Loop):
            yield from walk_block(stmt.body)


def declared_locals(block: tuple[Stmt, ...]) -> list[BufferDecl]:
    """The block-local buffers declared in ``block`` and in the loops inside it."""
    return [stmt.decl for stmt in walk_block(block) if isinstance(stmt, New)]


def names_in_use(program: Program) -> set[str]:
    """Every name a rewrite must not reuse: sizes (bound ones too), buffers and loop indices."""
    names = set(program.param_names) | {name for name, _ in program.bindings}
    names |= {d.name for d in program.all_buffers()}
    return names | {loop.index for loop, _ in loops(program)}


def fresh_name(hint: str, taken: set[str]) -> str:
    """``hint``, or ``hint2``, ``hint3``, ... : the first not in ``taken``."""
    name, k = hint, 1
    while name in taken:
        k += 1
        name = f"{hint}{k}"
    return name
