"""Structural checks of a Program, whether it came from text or was built in Python.

What is checked here needs no polyhedral reasoning: names are declared once and used in
scope, buffers are indexed with their arity, ``in`` buffers are never written, and every
index is quasi-affine in the loop indices (a product needs a constant side; ``//`` and
``%`` need a positive constant divisor). Products with a *size* (``i * N``) pass here: they
become affine once the size is bound, and the polyhedral model says so if it is not.
Races and out-of-bounds accesses are proved by :mod:`polymap.poly`.
"""

from __future__ import annotations

from polymap.errors import (
    AccessError,
    ArityError,
    DeclarationError,
    NotAffineError,
    PolymapError,
    SourceLoc,
    UndeclaredError,
)
from polymap.ir.nodes import (
    Anchor,
    Assign,
    BufferDecl,
    BufferKind,
    Call,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    INeg,
    Loop,
    New,
    Program,
    Read,
    Stmt,
    ValueExpr,
    index_vars,
    reads_of,
)


def validate(program: Program) -> Program:
    """Return ``program`` unchanged if it is well formed; raise the first problem found."""
    _Validator(program).run()
    return program


class _Validator:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.params = frozenset(program.param_names)
        self.statement_names: set[str] = set()

    def error(self, cls: type[PolymapError], message: str, loc: SourceLoc | None) -> PolymapError:
        return cls(message, loc=loc, **self.program.error_context())

    def run(self) -> None:
        seen: dict[str, SourceLoc | None] = {}
        for param in self.program.params:
            self.declare(param.name, param.loc, seen)
        for decl in self.program.all_buffers():
            self.declare(decl.name, decl.loc, seen)
            self.check_shape(decl)
        self.block(self.program.body, (), {b.name: b for b in self.program.buffers})

    def declare(self, name: str, loc: SourceLoc | None, seen: dict[str, SourceLoc | None]) -> None:
        if name in seen:
            first = f" (first at {seen[name]})" if seen[name] else ""
            raise self.error(DeclarationError, f"'{name}' is declared twice{first}", loc)
        seen[name] = loc

    def check_shape(self, decl: BufferDecl) -> None:
        for extent in decl.shape:
            unknown = index_vars(extent) - self.params
            if unknown:
                raise self.error(
                    UndeclaredError,
                    f"the shape of buffer '{decl.name}' uses {', '.join(sorted(unknown))}: shapes may use "
                    f"declared sizes only",
                    decl.loc,
                )
            self.affine(extent, frozenset(), f"the shape of buffer '{decl.name}'", decl.loc)

    # -- statements

    def block(self, stmts: tuple[Stmt, ...], indices: tuple[str, ...], buffers: dict[str, BufferDecl]) -> None:
        for stmt in stmts:
            if isinstance(stmt, New):
                if stmt.decl.kind is not BufferKind.NEW:
                    raise self.error(DeclarationError,
                                     f"buffer '{stmt.decl.name}' declared in a block must be 'new'", stmt.decl.loc)
                buffers = {**buffers, stmt.decl.name: stmt.decl}
            elif isinstance(stmt, Loop):
                self.loop(stmt, indices, buffers)
            else:
                self.statement(stmt, indices, buffers)

    def loop(self, loop: Loop, indices: tuple[str, ...], buffers: dict[str, BufferDecl]) -> None:
        if loop.index in indices or loop.index in self.params or loop.index in buffers:
            raise self.error(DeclarationError,
                             f"loop index '{loop.index}' shadows an enclosing index, a size or a buffer", loop.loc)
        what = f"the extent of {loop.kind.value} loop '{loop.index}'"
        self.index(loop.extent, indices, what, loop.loc)
        self.block(loop.body, indices + (loop.index,), buffers)

    def statement(self, stmt: Assign | Anchor, indices: tuple[str, ...], buffers: dict[str, BufferDecl]) -> None:
        if stmt.name in self.statement_names:
            raise self.error(DeclarationError, f"statement name '{stmt.name}' is used twice", stmt.loc)
        self.statement_names.add(stmt.name)
        label = f"{stmt.name} `{stmt}`"
        if isinstance(stmt, Assign):
            decl = self.access(stmt.target, indices, buffers, label, stmt.loc)
            if decl.kind is BufferKind.IN:
                raise self.error(
                    AccessError,
                    f"{label}: buffer '{decl.name}' is an input ('in') and cannot be written; declare it 'inout'",
                    stmt.loc,
                )
        for read in reads_of(stmt.value):
            self.access(read, indices, buffers, label, read.loc or stmt.loc)
        self.value(stmt.value, indices, label, stmt.loc)

    def access(self, access: Read, indices: tuple[str, ...], buffers: dict[str, BufferDecl], label: str,
               loc: SourceLoc | None) -> BufferDecl:
        decl = buffers.get(access.buffer)
        if decl is None:
            raise self.error(UndeclaredError, f"{label}: buffer '{access.buffer}' is not declared here", loc)
        if len(access.indices) != len(decl.shape):
            raise self.error(
                ArityError,
                f"{label}: buffer '{decl.name}' has {len(decl.shape)} dimension(s) but {access} gives "
                f"{len(access.indices)} index(es)",
                loc,
            )
        for index in access.indices:
            self.index(index, indices, f"index {index} of {access} in {label}", loc)
        return decl

    def value(self, expr: ValueExpr, indices: tuple[str, ...], label: str, loc: SourceLoc | None) -> None:
        if isinstance(expr, IndexValue):
            unknown = index_vars(expr.expr) - self.params - set(indices)
            if unknown:
                raise self.error(UndeclaredError, f"{label}: unknown name {', '.join(sorted(unknown))}", loc)
        elif isinstance(expr, Call):
            if len(expr.args) != expr.fn.arity:
                raise self.error(ArityError, f"{label}: {expr.fn.value}() takes {expr.fn.arity} argument(s)", loc)
            for arg in expr.args:
                self.value(arg, indices, label, loc)
        elif not isinstance(expr, Read):
            for child in (getattr(expr, "operand", None), getattr(expr, "lhs", None), getattr(expr, "rhs", None)):
                if child is not None:
                    self.value(child, indices, label, loc)

    # -- index expressions

    def index(self, expr: IndexExpr, indices: tuple[str, ...], what: str, loc: SourceLoc | None) -> None:
        unknown = index_vars(expr) - self.params - set(indices)
        if unknown:
            raise self.error(UndeclaredError, f"{what}: unknown index or size {', '.join(sorted(unknown))}", loc)
        self.affine(expr, frozenset(indices), what, loc)

    def affine(self, expr: IndexExpr, loop_vars: frozenset[str], what: str, loc: SourceLoc | None) -> None:
        """Quasi-affine in the loop indices (sizes are checked once bound, by the model)."""
        if isinstance(expr, INeg):
            self.affine(expr.operand, loop_vars, what, loc)
        if not isinstance(expr, IBin):
            return
        self.affine(expr.lhs, loop_vars, what, loc)
        self.affine(expr.rhs, loop_vars, what, loc)
        if expr.op is IndexOp.MUL and index_vars(expr.lhs) & loop_vars and index_vars(expr.rhs) & loop_vars:
            raise self.error(
                NotAffineError,
                f"{what}: '{expr}' multiplies two loop indices, which is not affine (a product needs a "
                f"constant factor)",
                loc,
            )
        if expr.op in (IndexOp.FLOORDIV, IndexOp.MOD):
            if index_vars(expr.rhs) & loop_vars or (isinstance(expr.rhs, IConst) and expr.rhs.value <= 0):
                raise self.error(
                    NotAffineError,
                    f"{what}: '{expr}' divides by {expr.rhs}; '/', '//' and '%' need a positive constant divisor",
                    loc,
                )
