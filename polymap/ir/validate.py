"""Structural checks of a Program, whether it came from text or was built in Python.

What is checked here needs no polyhedral reasoning: names are declared once and used in
scope, buffers are indexed with their arity, ``in`` buffers are never written, and every
index is quasi-affine in the loop indices (a product needs a constant side; ``//`` and
``%`` need a positive constant divisor). Products with a *size* (``i * N``) pass here: they
become affine once the size is bound, and the polyhedral model says so if it is not.
Races and out-of-bounds accesses are proved by :mod:`polymap.poly`.

Before any of that, one iterative pass checks what the recursive checks rely on: loop nests
and expressions within the nesting limits of :mod:`polymap.ir.nodes`, every index constant
within 64 bits, and every integral literal of a statement that computes in i32 within i32.
"""

from __future__ import annotations

from polymap.errors import (
    AccessError,
    ArgumentError,
    ArityError,
    DeclarationError,
    NotAffineError,
    PolymapError,
    ProgramError,
    RangeError,
    SourceLoc,
    UndeclaredError,
)
from polymap.ir.nodes import (
    ATOMIC_OPS,
    ATOMIC_TYPES,
    INDEX_MAX,
    INDEX_MIN,
    MAX_EXPR_NESTING,
    MAX_LOOP_NESTING,
    MAX_RANK,
    Anchor,
    Assign,
    Assume,
    Binary,
    BufferDecl,
    BufferKind,
    Call,
    Compare,
    Const,
    DType,
    Gather,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    INeg,
    Logic,
    Loop,
    Neg,
    New,
    Not,
    Program,
    Read,
    Select,
    Stmt,
    ValueExpr,
    ValueOp,
    gathers_of,
    index_vars,
    leaves_of,
    operand_reads,
    value_children,
)
from polymap.ir.value_types import (
    bitwise_type,
    comparison_type,
    integer_range,
    predicate_type,
    statement_type,
    value_type,
)


def validate(program: Program) -> Program:
    """Return ``program`` unchanged if it is well formed; raise the first problem found."""
    _Validator(program).run()
    return program


def check_program_argument(program: object, call: str) -> Program:
    """The check at the top of a public entry point that takes a Program: the right type
    (an ArgumentError saying what was expected otherwise) within the limits of
    :func:`check_limits`, so that a program built in Python cannot crash a recursive stage."""
    if not isinstance(program, Program):
        hint = " (parse the text first: polymap.parse(text))" if isinstance(program, str) else ""
        raise ArgumentError(
            f"{call}() takes a polymap Program (from polymap.parse or polymap.load), got "
            f"{type(program).__name__}{hint}"
        )
    check_limits(program)
    return program


def check_limits(program: Program) -> None:
    """Only the iterative first pass of :func:`validate` (nesting limits and constant ranges):
    what every recursive stage relies on, cheap enough to run at each entry point and after
    sizes are bound (binding folds constants, which can leave the 64-bit range)."""
    _Validator(program).limits()


class _Validator:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.params = frozenset(program.param_names)
        self.statement_names: set[str] = set()

    def error(self, cls: type[PolymapError], message: str, loc: SourceLoc | None) -> PolymapError:
        return cls(message, loc=loc, **self.program.error_context())

    def run(self) -> None:
        self.limits()
        seen: dict[str, SourceLoc | None] = {}
        for param in self.program.params:
            self.declare(param.name, param.loc, seen)
        for decl in self.program.all_buffers():
            self.declare(decl.name, decl.loc, seen)
            self.check_shape(decl)
        for assumption in self.program.assumptions:
            self.check_assumption(assumption)
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

    def guard(self, guard, indices: tuple[str, ...], label: str, loc: SourceLoc | None) -> None:
        """The condition of an if around a statement: comparisons of index expressions over
        the enclosing loops' indices and the sizes."""
        if not isinstance(guard, CONDITIONS) or _misplaced(guard, label):
            raise self.error(ProgramError, f"{label}: its guard '{guard}' is not a condition", loc)
        for leaf in leaves_of(guard):
            if not isinstance(leaf, IndexValue):
                raise self.error(
                    ProgramError,
                    f"{label}: the condition of its if, '{guard}', compares loop indices and sizes, not data "
                    f"(choose between values with select)",
                    loc,
                )
            self.index(leaf.expr, indices, f"the condition of the if around {label}", loc)

    def check_assumption(self, assumption: Assume) -> None:
        """An ``assume``: comparisons of index expressions over the sizes only."""
        what = f"'{assumption}'"
        for leaf in leaves_of(assumption.cond):
            if not isinstance(leaf, IndexValue):
                raise self.error(
                    ProgramError,
                    f"{what}: an assumption compares index expressions over the sizes",
                    assumption.loc,
                )
            unknown = index_vars(leaf.expr) - self.params
            if unknown:
                raise self.error(
                    UndeclaredError,
                    f"{what} uses {', '.join(sorted(unknown))}: an assumption may use declared sizes only",
                    assumption.loc,
                )
            self.affine(leaf.expr, frozenset(), what, assumption.loc)

    # -- limits (iterative: the recursive checks below are safe only once these hold)

    def limits(self) -> None:
        dtypes: dict[str, DType] = {}
        for decl in self.program.buffers:
            self.decl_limits(decl)
            dtypes[decl.name] = decl.dtype
        stack: list[tuple[Stmt, int]] = [(stmt, 1) for stmt in reversed(self.program.body)]
        while stack:
            stmt, depth = stack.pop()
            if isinstance(stmt, Loop):
                if depth > MAX_LOOP_NESTING:
                    raise self.error(
                        ProgramError,
                        f"loop '{stmt.index}' nests more than {MAX_LOOP_NESTING} deep (polymap's limit)",
                        stmt.loc,
                    )
                what = f"the extent of {stmt.kind.value} loop '{stmt.index}'"
                self.expression_limits(stmt.extent, what, stmt.loc, None)
                stack.extend((inner, depth + 1) for inner in reversed(stmt.body))
            elif isinstance(stmt, New):
                self.decl_limits(stmt.decl)
                dtypes[stmt.decl.name] = stmt.decl.dtype
            elif isinstance(stmt, (Assign, Anchor)):
                if isinstance(stmt.value, CONDITIONS):
                    raise self.error(ProgramError, _as_value(f"statement {stmt.name}", stmt.value), stmt.loc)
                target = (Read(stmt.buffer, stmt.indices),) if isinstance(stmt, Assign) else ()
                guard = tuple(c for c in (stmt.guard, stmt.predicate) if c is not None)
                for part in (*target, stmt.value, *guard):
                    self.expression_limits(part, f"statement {stmt.name}", stmt.loc, None)
                # Only now that the depth is known to be safe: the compute type walks the value.
                dtype_of = lambda name: dtypes.get(name, DType.F32)  # noqa: E731
                compute = statement_type(stmt, dtype_of)
                what = f"statement {stmt.name}"
                self.expression_limits(stmt.value, what, stmt.loc, (compute, dtype_of))
                if stmt.predicate is not None:
                    judged = predicate_type(stmt, dtype_of)
                    self.expression_limits(stmt.predicate, what, stmt.loc, (judged, dtype_of))

    def decl_limits(self, decl: BufferDecl) -> None:
        if len(decl.shape) > MAX_RANK:
            raise self.error(
                ProgramError,
                f"buffer '{decl.name}' has {len(decl.shape)} dimensions; polymap allows at most {MAX_RANK}",
                decl.loc,
            )
        for extent in decl.shape:
            self.expression_limits(extent, f"the shape of buffer '{decl.name}'", decl.loc, None)

    def after_binding(self) -> str:
        bound = ", ".join(f"{n} = {v}" for n, v in self.program.bindings)
        return f" (with the sizes bound: {bound})" if bound else ""

    def expression_limits(self, root, what: str, loc: SourceLoc | None, typed=None) -> None:
        """Depth and index constants; with ``typed`` (a statement's computation type and its
        buffers' types, once the depth is known to be safe), the operands of its bitwise
        operations, which must be integers, and its integral literals, which must fit the
        integer type they take (the statement's, or a bitwise operation's below it)."""
        own = (typed[0], "the type the statement computes in") if typed else None
        stack = [(root, 1, own)]
        while stack:
            expr, depth, context = stack.pop()
            if depth > MAX_EXPR_NESTING:
                raise self.error(
                    ProgramError,
                    f"{what}: an expression nests more than {MAX_EXPR_NESTING} levels deep (polymap's limit)",
                    loc,
                )
            misplaced = _misplaced(expr, what)
            if misplaced:
                raise self.error(ProgramError, misplaced, loc)
            if isinstance(expr, IConst) and not INDEX_MIN <= expr.value <= INDEX_MAX:
                raise self.error(
                    RangeError,
                    f"{what}: the index constant {expr.value} does not fit in 64 bits, the "
                    f"widest index arithmetic polymap emits{self.after_binding()}",
                    loc,
                )
            if (
                isinstance(expr, Const)
                and isinstance(expr.value, int)
                and not INDEX_MIN <= expr.value <= INDEX_MAX
            ):
                raise self.error(
                    RangeError,
                    f"{what}: the integer literal {expr.value} does not fit in 64 bits; write a "
                    f"large value as a float literal (e.g. 1e30)",
                    expr.loc or loc,
                )
            if isinstance(expr, Binary) and expr.op.is_bitwise and typed:
                island = self.bitwise_operands(expr, what, loc, typed[1])
                context = (island, f"the type its '{expr.op.value}' computes in")
            if (
                isinstance(expr, Const)
                and context is not None
                and context[0].is_integer
                and _is_integral(expr.value)
            ):
                low, high = integer_range(context[0])
                if not low <= expr.value <= high:
                    raise self.error(
                        RangeError,
                        f"{what}: the literal {_literal_text(expr.value)} does not fit in "
                        f"{context[0].value} ({low}..{high}), {context[1]}",
                        expr.loc or loc,
                    )
            if isinstance(expr, Compare) and typed:  # the type of what it reads (``value_types``)
                context = (comparison_type(expr, typed[0], typed[1]), "the type the comparison computes in")
            elif isinstance(expr, Call) and expr.fn.cast is not None:
                context = own  # typed as outside any bitwise operation (``value_types``)
            stack.extend((child, depth + 1, context) for child in _children(expr))

    def bitwise_operands(self, expr: Binary, what: str, loc: SourceLoc | None, dtype_of) -> DType:
        """The type of a bitwise operation (``bitwise_type``), which its literals take; a
        float operand is an error."""
        # ``~x`` is lowered to ``x ^ -1``, the -1 at the ``~`` itself
        inverts = expr.op is ValueOp.BITXOR and expr.rhs == Const(-1) and expr.rhs.loc == expr.loc
        for operand in (expr.lhs,) if inverts else (expr.lhs, expr.rhs):
            dtype = value_type(operand, DType.I32, dtype_of)
            if not dtype.is_integer:
                raise self.error(
                    ProgramError,
                    f"{what}: '{'~' if inverts else expr.op.value}' takes integers, and its operand "
                    f"'{operand}' is {dtype.value}: convert it first, e.g. i32({operand})",
                    expr.loc or loc,
                )
        return bitwise_type(expr, dtype_of)

    # -- statements

    def block(
        self, stmts: tuple[Stmt, ...], indices: tuple[str, ...], buffers: dict[str, BufferDecl]
    ) -> None:
        for stmt in stmts:
            if isinstance(stmt, New):
                if stmt.decl.kind is not BufferKind.NEW:
                    raise self.error(
                        DeclarationError,
                        f"buffer '{stmt.decl.name}' declared in a block must be 'new'",
                        stmt.decl.loc,
                    )
                buffers = {**buffers, stmt.decl.name: stmt.decl}
            elif isinstance(stmt, Loop):
                self.loop(stmt, indices, buffers)
            else:
                self.statement(stmt, indices, buffers)

    def loop(self, loop: Loop, indices: tuple[str, ...], buffers: dict[str, BufferDecl]) -> None:
        if loop.index in indices or loop.index in self.params or loop.index in buffers:
            raise self.error(
                DeclarationError,
                f"loop index '{loop.index}' shadows an enclosing index, a size or a buffer",
                loop.loc,
            )
        what = f"the extent of {loop.kind.value} loop '{loop.index}'"
        self.index(loop.extent, indices, what, loop.loc)
        self.block(loop.body, indices + (loop.index,), buffers)

    def statement(
        self, stmt: Assign | Anchor, indices: tuple[str, ...], buffers: dict[str, BufferDecl]
    ) -> None:
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
        for read in operand_reads(stmt):
            self.access(read, indices, buffers, label, read.loc or stmt.loc)
        if isinstance(stmt, Assign) and stmt.is_atomic:
            self.atomic_update(stmt, decl, label)
        self.value(stmt.value, indices, label, stmt.loc)
        if stmt.guard is not None:
            self.guard(stmt.guard, indices, label, stmt.loc)
        if stmt.predicate is not None:
            self.condition(stmt.predicate, indices, label, stmt.loc)

    def access(
        self,
        access: Read,
        indices: tuple[str, ...],
        buffers: dict[str, BufferDecl],
        label: str,
        loc: SourceLoc | None,
    ) -> BufferDecl:
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
            if isinstance(index, Gather):
                self.gather(index, indices, buffers, label, loc)
            else:
                self.index(index, indices, f"index {index} of {access} in {label}", loc)
        return decl

    def atomic_update(self, stmt: Assign, decl: BufferDecl, label: str) -> None:
        """A write through a gathered index (``O[I[i]] += x``, a scatter) or one written
        ``atomic``: an update the GPU makes as one atomic operation, on a program-wide buffer
        of a type it has atomics for, which the statement reads nowhere else (the atomic is
        the only access that may meet another instance's)."""
        sources = ", ".join(sorted({g.source.buffer for _, g in gathers_of(stmt.target)}))
        what = f"a write through an index read from '{sources}' (a scatter)" if sources else "an atomic write"
        if stmt.op not in ATOMIC_OPS:
            raise self.error(
                ProgramError,
                f"{label}: {what} must be an update that runs as an atomic: +=, -=, max= or min=, not "
                f"{stmt.op.value} (two instances may write one element)",
                stmt.loc,
            )
        if decl.dtype not in ATOMIC_TYPES:
            raise self.error(
                ProgramError,
                f"{label}: an atomic update of '{decl.name}' ({decl.dtype.value}) needs a type the GPU updates "
                f"atomically: {', '.join(t.value for t in ATOMIC_TYPES)}",
                stmt.loc,
            )
        if decl not in self.program.buffers:
            raise self.error(
                ProgramError,
                f"{label}: an atomic update's target '{decl.name}' must be declared at the top of the program "
                "(a block's 'new' buffer is private to each instance)",
                stmt.loc,
            )
        others = [r for r in operand_reads(stmt) if r.buffer == decl.name]
        others += [g.source for _, g in gathers_of(stmt.target) if g.source.buffer == decl.name]
        if others:
            raise self.error(
                ProgramError,
                f"{label}: an atomic update of '{decl.name}' reads '{decl.name}' only through its own update "
                f"(it reads {others[0]} too, which another instance may be updating)",
                others[0].loc or stmt.loc,
            )

    def gather(
        self,
        gather: Gather,
        indices: tuple[str, ...],
        buffers: dict[str, BufferDecl],
        label: str,
        loc: SourceLoc | None,
    ) -> None:
        """A gathered index (of a read, or of an update's target: a scatter): from an integer
        buffer, its own indices affine."""
        source = gather.source
        if any(isinstance(i, Gather) for i in source.indices):
            raise self.error(
                NotAffineError, f"{label}: gathers do not nest: the indices of {source} must be affine", loc
            )
        decl = self.access(source, indices, buffers, label, source.loc or loc)
        if not decl.dtype.is_integer:
            raise self.error(
                ProgramError,
                f"{label}: buffer '{decl.name}' is {decl.dtype.value}: an index read from a buffer "
                "(a gather) needs an integer type (i32, i64, i8, u8 or bool)",
                source.loc or loc,
            )

    def value(self, expr: ValueExpr, indices: tuple[str, ...], label: str, loc: SourceLoc | None) -> None:
        if isinstance(expr, Select):  # the roles of its operands are checked by ``limits``
            self.condition(expr.cond, indices, label, loc)
            self.value(expr.then, indices, label, loc)
            self.value(expr.otherwise, indices, label, loc)
        elif isinstance(expr, IndexValue):
            unknown = index_vars(expr.expr) - self.params - set(indices)
            if unknown:
                raise self.error(UndeclaredError, f"{label}: unknown name {', '.join(sorted(unknown))}", loc)
        elif isinstance(expr, Call):
            if len(expr.args) != expr.fn.arity:
                raise self.error(
                    ArityError, f"{label}: {expr.fn.value}() takes {expr.fn.arity} argument(s)", loc
                )
            for arg in expr.args:
                self.value(arg, indices, label, loc)
        elif not isinstance(expr, Read):
            for child in (
                getattr(expr, "operand", None),
                getattr(expr, "lhs", None),
                getattr(expr, "rhs", None),
            ):
                if child is not None:
                    self.value(child, indices, label, loc)

    def condition(self, cond, indices: tuple[str, ...], label: str, loc: SourceLoc | None) -> None:
        """A condition: comparisons of values joined by ``and``, ``or``, ``not``."""
        for child in value_children(cond):
            if isinstance(cond, Compare):
                self.value(child, indices, label, loc)
            else:
                self.condition(child, indices, label, loc)

    # -- index expressions

    def index(self, expr: IndexExpr, indices: tuple[str, ...], what: str, loc: SourceLoc | None) -> None:
        unknown = index_vars(expr) - self.params - set(indices)
        if unknown:
            raise self.error(
                UndeclaredError, f"{what}: unknown index or size {', '.join(sorted(unknown))}", loc
            )
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


def _children(expr) -> tuple:
    """The sub-expressions of an index or value expression or condition (a read's indices
    included)."""
    if isinstance(expr, IBin):
        return (expr.lhs, expr.rhs)
    if isinstance(expr, INeg):
        return (expr.operand,)
    if isinstance(expr, Read):
        return expr.indices
    if isinstance(expr, Gather):
        return (expr.source,)
    if isinstance(expr, IndexValue):
        return (expr.expr,)
    return value_children(expr)


CONDITIONS = (Compare, Logic, Not)


def _as_value(what: str, cond) -> str:
    return (
        f"{what}: the condition '{cond}' is used as a value; a condition chooses between two values: "
        f"select({cond}, a, b)"
    )


def _misplaced(expr, what: str) -> str | None:
    """What is wrong where a condition stands for a value or a value for a condition among
    ``expr``'s operands (a program built in Python; the parser's lowering says it at the
    text's line:col), or None."""
    if isinstance(expr, Select):
        conditions, values = (expr.cond,), (expr.then, expr.otherwise)
    elif isinstance(expr, (Logic, Not)):
        conditions, values = value_children(expr), ()
    elif isinstance(expr, (Compare, Binary, Neg, Call)):
        conditions, values = (), value_children(expr)
    else:
        return None
    for cond in conditions:
        if not isinstance(cond, CONDITIONS):
            return f"{what}: '{cond}' is not a condition: a comparison of values (< <= > >= == !=), or conditions joined by and, or, not"
    for value in values:
        if isinstance(value, CONDITIONS):
            return _as_value(what, value)
    return None


def _is_integral(value: float) -> bool:
    # An integral float literal is an i32 value in an i32 statement, as in the reference.
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _literal_text(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(value)
