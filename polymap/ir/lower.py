"""Lowering the syntax tree to IR: resolve every name in its scope and expand einsums.

A name in an index is a loop index in scope or a size parameter; in a value it may also be
a 0-d buffer. A name that is none of these, used as an index of an assignment, is an
einsum index (:mod:`polymap.ir.einsum` turns it into an implicit loop). Everything else
the program gets wrong is reported by :func:`polymap.ir.validate.validate`, shared with
programs built in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from polymap.errors import (
    ArityError,
    DeclarationError,
    NotAffineError,
    PolymapError,
    ProgramError,
    RangeError,
    SourceLoc,
    UndeclaredError,
)
from polymap.ir import syntax as S
from polymap.ir.einsum import implicit_loops
from polymap.ir.nodes import (
    INDEX_MAX,
    INDEX_MIN,
    Anchor,
    Assign,
    AssignOp,
    Assume,
    Binary,
    BufferDecl,
    BufferKind,
    Call,
    CmpOp,
    Compare,
    Condition,
    Const,
    DType,
    Fn,
    Gather,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    INeg,
    IVar,
    Logic,
    LogicOp,
    Loop,
    LoopKind,
    Neg,
    New,
    Not,
    Param,
    Program,
    Read,
    Select,
    Stmt,
    ValueExpr,
    ValueOp,
    fold_index,
    guarded,
    index_vars,
    leaves_of,
    reads_of,
    settle,
    substitute_value,
)
from polymap.ir.validate import validate
from polymap.ir.walk import walk_block

_INDEX_OPS = {
    "+": IndexOp.ADD,
    "-": IndexOp.SUB,
    "*": IndexOp.MUL,
    "/": IndexOp.FLOORDIV,
    "//": IndexOp.FLOORDIV,
    "%": IndexOp.MOD,
}
_VALUE_OPS = {op.value: op for op in ValueOp}


def _predicated(stmt: Stmt, cond: Condition | None) -> Stmt:
    """``stmt`` (and every statement in it) under the data condition ``cond`` as well as
    its own predicate."""
    if cond is None:
        return stmt
    if isinstance(stmt, Loop):
        return replace(stmt, body=tuple(_predicated(s, cond) for s in stmt.body))
    if isinstance(stmt, (Assign, Anchor)):
        own = stmt.predicate
        return replace(stmt, predicate=cond if own is None else Logic(LogicOp.AND, cond, own))
    return stmt


def _holds_data_if(block, scope: _Scope) -> bool:
    """Whether ``block`` (syntax) holds an if whose condition reads data, at any depth."""
    for item in block:
        if isinstance(item, S.SIf):
            if _data_read(item.cond, scope) is not None or _holds_data_if(
                (*item.then, *item.otherwise), scope
            ):
                return True
        elif isinstance(item, S.SLoop) and _holds_data_if(item.body, scope):
            return True
    return False


def _all_of(conditions: list[Condition]) -> Condition | None:
    """The conjunction of ``conditions``, left to right; None of none."""
    out = None
    for cond in conditions:
        out = cond if out is None else Logic(LogicOp.AND, out, cond)
    return out


def _conjuncts(expr: S.SExpr) -> list[S.SExpr]:
    """The operands of a chain of ``and`` (the expression itself where it is none)."""
    if isinstance(expr, S.SLogic) and expr.op == "and":
        return [*_conjuncts(expr.lhs), *_conjuncts(expr.rhs)]
    return [expr]


def _data_read(expr: S.SExpr, scope: _Scope):
    """The first buffer that ``expr`` reads (a subscript or a 0-d buffer's name), or None."""
    if isinstance(expr, S.SSubscript):
        return expr
    if isinstance(expr, S.SName):
        return expr if expr.name in scope.buffers else None
    for child in (getattr(expr, "operand", None), getattr(expr, "lhs", None), getattr(expr, "rhs", None)):
        if child is not None and (found := _data_read(child, scope)) is not None:
            return found
    for arg in getattr(expr, "args", ()):
        if (found := _data_read(arg, scope)) is not None:
            return found
    return None


def _gather_misplaced(buffer: str, what: str) -> str:
    return (
        f"buffer '{buffer}' read in {what}: an index read from a buffer (a gather, A[{buffer}[i]], or a "
        f"scatter, O[{buffer}[i]] += x) may stand only as a whole index of an access: not in index "
        "arithmetic, an extent, a shape, a condition or the index of a gathered index"
    )


_FUNCTIONS = {fn.value: fn for fn in Fn}
SELECT = "select"  # select(condition, a, b): a value, not a function of values
_COMPARISONS = {op.value: op for op in CmpOp}
# the literals of the float values a number cannot spell, unless a size or index takes the name
FLOAT_NAMES = {"inf": math.inf, "nan": math.nan}
_CONDITION_WORD = {S.SCompare: "a comparison", S.SLogic: "and/or", S.SNot: "not"}
_DTYPES = {dt.value: dt for dt in DType}


@dataclass(frozen=True, slots=True)
class _Scope:
    indices: tuple[str, ...]  # enclosing loop indices, outermost first
    buffers: dict[str, BufferDecl]  # every buffer visible here


@dataclass(slots=True)
class _FreeNames:
    """Names used as indices of one assignment that nothing declares (einsum indices)."""

    in_target: list[str] = field(default_factory=list)
    in_value: list[str] = field(default_factory=list)
    collecting_target: bool = True

    def add(self, name: str) -> None:
        seen = self.in_target if self.collecting_target else self.in_value
        if name not in seen:
            seen.append(name)


def lower(items: tuple[S.SStmt, ...], *, name: str, source: str, text: str) -> Program:
    """Build the checked Program from parsed items."""
    return _Lowering(source, text).program(items, name)


class _Lowering:
    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.text = text
        self.params: dict[str, Param] = {}
        self.statement_count = 0

    def error(self, cls: type[PolymapError], message: str, loc: SourceLoc, **extra) -> PolymapError:
        return cls(message, loc=loc, source=self.source, text=self.text, **extra)

    # -- program and declarations

    def program(self, items: tuple[S.SStmt, ...], name: str) -> Program:
        for item in items:
            if isinstance(item, S.SParam):
                self.declare_param(item)
        buffers: dict[str, BufferDecl] = {}
        for item in items:
            if isinstance(item, S.SDecl):
                decl = self.decl(item, _Scope((), buffers))
                buffers[decl.name] = decl
        scope = _Scope((), buffers)
        assumptions = tuple(self.assumption(i) for i in items if isinstance(i, S.SAssume))
        self.check_defaults(assumptions)
        body = self.block([i for i in items if not isinstance(i, (S.SParam, S.SDecl, S.SAssume))], scope)
        program = Program(
            name=name,
            params=tuple(self.params.values()),
            buffers=tuple(buffers.values()),
            body=body,
            source=self.source,
            text=self.text,
            assumptions=assumptions,
        )
        return validate(program)

    def check_defaults(self, assumptions: tuple[Assume, ...]) -> None:
        """The sizes' defaults, where an assumption mentions only sizes that have one, must
        satisfy it: the program would otherwise fail at its first run."""
        defaults = {n: IConst(p.default) for n, p in self.params.items() if p.default is not None}
        for a in assumptions:
            used = {v for leaf in leaves_of(a.cond) for v in index_vars(leaf.expr)}
            if used and used <= defaults.keys() and settle(substitute_value(a.cond, defaults)) is False:
                shown = ", ".join(f"{n} = {defaults[n].value}" for n in sorted(used))
                raise self.error(
                    DeclarationError,
                    f"the defaults {shown} violate '{a}': change a default or the assumption",
                    self.params[sorted(used)[0]].loc,
                )

    def assumption(self, item: S.SAssume) -> Assume:
        usage = "'assume' takes a condition on the sizes, e.g. 'assume K >= M and N % 4 == 0'"
        return Assume(self.index_condition(item.cond, _Scope((), {}), "an assumption", usage), item.loc)

    def declare_param(self, item: S.SParam) -> None:
        if item.name in self.params:
            first = self.params[item.name].loc
            raise self.error(
                DeclarationError, f"size '{item.name}' is declared twice (first at {first})", item.loc
            )
        default = None
        if item.default is not None:
            expr = self.index(item.default, _Scope((), {}), None, what=f"the default of size '{item.name}'")
            if not isinstance(expr, IConst) or expr.value < 0:
                raise self.error(
                    DeclarationError,
                    f"the default of size '{item.name}' must be a non-negative integer constant, got {expr}",
                    item.loc,
                )
            default = expr.value
        self.params[item.name] = Param(item.name, default, item.loc)

    def decl(self, item: S.SDecl, scope: _Scope) -> BufferDecl:
        if item.name in scope.buffers or item.name in self.params or item.name in scope.indices:
            raise self.error(DeclarationError, f"'{item.name}' is declared twice", item.loc)
        if item.dtype not in _DTYPES:
            raise self.error(
                DeclarationError,
                f"unknown dtype '{item.dtype}' for buffer '{item.name}': use one of {', '.join(_DTYPES)}",
                item.dtype_loc,
            )
        # Shapes depend on sizes only: a buffer's extent cannot vary per loop iteration.
        shape = tuple(
            self.index(e, _Scope((), {}), None, what=f"the shape of buffer '{item.name}'", pieces=True)
            for e in item.shape
        )
        return BufferDecl(item.name, BufferKind(item.kind), _DTYPES[item.dtype], shape, item.loc)

    # -- statements

    def block(self, items: list[S.SStmt], scope: _Scope) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for item in items:
            if isinstance(item, S.SDecl):  # only 'new' reaches here (the parser checks)
                decl = self.decl(item, scope)
                scope = _Scope(scope.indices, {**scope.buffers, decl.name: decl})
                out.append(New(decl))
            elif isinstance(item, S.SLoop):
                out.append(self.loop(item, scope))
            elif isinstance(item, S.SAnchor):
                out.append(Anchor(self.next_name(), self.value(item.value, scope, None), item.loc))
            elif isinstance(item, S.SIf):
                out.extend(self.if_block(item, scope))
            else:
                out.append(self.assign(item, scope))
        return tuple(out)

    def if_block(self, item: S.SIf, scope: _Scope) -> list[Stmt]:
        """``if cond { then } else { otherwise }``: the statements of both, in order, each
        with the condition (or its negation) as its guard, anded with its own: the IR has
        no if node; a guard restricts a statement's domain. A condition that reads data is
        a predicate instead (``data_if``)."""
        for body in (item.then, item.otherwise):
            for inner in body:
                if isinstance(inner, S.SDecl):
                    raise self.error(
                        ProgramError,
                        f"'new {inner.name}' inside an if: declare it before the if, in the enclosing block",
                        inner.loc,
                    )
        usage = (
            "'if' takes a condition: a comparison of loop indices and sizes (< <= > >= == !=), or "
            "conditions joined by and, or, not"
        )
        if _data_read(item.cond, scope) is not None:
            return self.data_if(item, scope)
        cond = self.index_condition(item.cond, scope, "an if's condition", usage)
        then = self.block(list(item.then), scope)
        otherwise = self.block(list(item.otherwise), scope)
        return [*(guarded(s, cond) for s in then), *(guarded(s, Not(cond)) for s in otherwise)]

    def data_if(self, item: S.SIf, scope: _Scope) -> list[Stmt]:
        """An if whose condition reads data: each statement inside evaluates the condition
        (a predicate, ``Assign.predicate``) and runs only where it holds. The conjuncts of
        the then-branch's condition that read no data stay a guard (they restrict the
        domain, so the data conjuncts' reads happen only inside it, as C's ``&&`` would
        have them); the else-branch is predicated on the negation of the whole condition
        (its index conjuncts first, so that C's ``&&`` tests them before the data).
        The condition is evaluated again by every statement, so the if's statements must
        not write what it reads (unless the if holds one statement, which reads before it
        writes). Where the condition has both kinds of conjuncts, the else-branch's
        statements come twice, one copy for each part of their domain, unless the
        else-branch holds an if on data of its own (an else-if chain): then it is predicated
        on the negation of the whole condition, whose data reads must be in bounds on the
        whole domain."""
        usage = (
            "'if' takes a condition: a comparison of values (< <= > >= == !=), conditions joined "
            "by and, or, not, or a bool value (a read of a bool buffer, bool(x))"
        )
        affine, data = [], []
        for part in _conjuncts(item.cond):
            (data if _data_read(part, scope) is not None else affine).append(part)
        guard = _all_of([self.index_condition(part, scope, "an if's condition", usage) for part in affine])
        predicate = _all_of([self.condition(part, scope, None, usage) for part in data])
        then = self.block(list(item.then), scope)
        otherwise = self.block(list(item.otherwise), scope)
        inner = [s for s in walk_block((*then, *otherwise)) if isinstance(s, (Assign, Anchor))]
        read = {r.buffer for r in reads_of(predicate)}  # the affine conjuncts read none
        # one statement, no loop: it evaluates the condition once, before it writes
        single = len(then) + len(otherwise) == 1 and isinstance((*then, *otherwise)[0], (Assign, Anchor))
        for stmt in inner:
            if isinstance(stmt, Assign) and stmt.buffer in read and not single:
                raise self.error(
                    ProgramError,
                    f"statement `{stmt}` writes '{stmt.buffer}', which the condition of its if reads: each "
                    "statement inside an if whose condition reads data evaluates the condition again, so "
                    "none may change it; compute the condition into a local before the if (new c: i32, "
                    "c = select(condition, 1, 0), then if c == 1 { .. })",
                    stmt.loc,
                )
        then = [_predicated(guarded(s, guard) if guard is not None else s, predicate) for s in then]
        if guard is None or _holds_data_if(item.otherwise, scope):
            # (an else-if chain on data is predicated whole: split at every level, its
            # statements would double with each arm)
            whole = predicate if guard is None else Logic(LogicOp.AND, guard, predicate)
            return [*then, *(_predicated(s, Not(whole)) for s in otherwise)]
        # not (G and P) is (not G) or (G and not P): the else-branch twice, over the two
        # parts of its domain, so that P's reads happen only where G holds
        again = self.block(list(item.otherwise), scope)
        return [
            *then,
            *(guarded(s, Not(guard)) for s in otherwise),
            *(_predicated(guarded(s, guard), Not(predicate)) for s in again),
        ]

    def index_condition(self, expr: S.SExpr, scope: _Scope, what: str, usage: str) -> Condition:
        """A condition on loop indices and sizes (an if's, an assume's): comparisons of
        index expressions over ``scope``'s indices and the sizes, joined by and, or, not.
        ``usage`` is the error where ``expr`` is no condition."""
        if isinstance(expr, S.SCompare):
            lhs, rhs = (
                IndexValue(self.index(e, scope, None, what=what, pieces=True)) for e in (expr.lhs, expr.rhs)
            )
            return Compare(_COMPARISONS[expr.op], lhs, rhs)
        if isinstance(expr, S.SLogic):
            lhs, rhs = (self.index_condition(e, scope, what, usage) for e in (expr.lhs, expr.rhs))
            return Logic(LogicOp(expr.op), lhs, rhs)
        if isinstance(expr, S.SNot):
            return Not(self.index_condition(expr.operand, scope, what, usage))
        if isinstance(expr, S.SCall) and expr.fn == DType.BOOL.value and len(expr.args) == 1:
            # bool(e) holds where e is not 0, as it does on data (``is_boolean``)
            inner = IndexValue(self.index(expr.args[0], scope, None, what=what, pieces=True))
            return Compare(CmpOp.NE, inner, IndexValue(IConst(0)))
        raise self.error(ProgramError, usage, expr.loc)

    def loop(self, item: S.SLoop, scope: _Scope) -> Loop:
        index = item.index
        if index in scope.indices:
            raise self.error(
                DeclarationError, f"loop index '{index}' shadows an enclosing loop's index", item.index_loc
            )
        if index in self.params or index in scope.buffers:
            what = "a size" if index in self.params else "a buffer"
            raise self.error(DeclarationError, f"loop index '{index}' has the name of {what}", item.index_loc)
        extent = self.index(item.extent, scope, None, what=f"the extent of loop '{index}'", pieces=True)
        inner = _Scope(scope.indices + (index,), scope.buffers)
        return Loop(LoopKind(item.kind), index, extent, self.block(list(item.body), inner), item.loc)

    def assign(self, item: S.SAssign, scope: _Scope) -> Stmt:
        free = _FreeNames()
        target = item.target
        if isinstance(target, S.SName):
            target = S.SSubscript(target.name, (), target.loc)
        if target.name not in scope.buffers:
            raise self.undeclared_buffer(target.name, target.loc, scope)
        indices = tuple(self.read_index(a, scope, free) for a in target.args)  # a scatter's too
        free.collecting_target = False
        value = self.value(item.value, scope, free)
        op = AssignOp(item.op)
        name = self.next_name()
        stmt = Assign(name, target.name, indices, op, value, item.loc, atomic=item.atomic)
        if not (free.in_target or free.in_value):
            return stmt
        reduced = [n for n in free.in_value if n not in free.in_target]
        return implicit_loops(stmt, free.in_target, reduced, scope.buffers, error=self.error)

    def next_name(self) -> str:
        name = f"S{self.statement_count}"
        self.statement_count += 1
        return name

    # -- expressions

    def undeclared_buffer(self, name: str, loc: SourceLoc, scope: _Scope) -> PolymapError:
        if name in self.params or name in scope.indices:
            kind = "a size" if name in self.params else "a loop index"
            return self.error(ProgramError, f"'{name}' is {kind}, not a buffer: it cannot be indexed", loc)
        return self.error(UndeclaredError, f"buffer '{name}' is not declared", loc)

    def index(
        self,
        expr: S.SExpr,
        scope: _Scope,
        free: _FreeNames | None,
        *,
        what: str = "an index",
        pieces: bool = False,
    ) -> IndexExpr:
        """An index expression; unknown names become einsum indices when ``free`` collects them.
        With ``pieces`` (loop extents, shapes, conditions) ``min(a, b)`` and ``max(a, b)`` are
        index expressions too (piecewise affine); in an access's indices they are refused."""
        if isinstance(expr, S.SNum):
            if not expr.is_int:
                raise self.error(
                    NotAffineError, f"{what} must be an integer expression, not {expr.text}", expr.loc
                )
            value = int(expr.text)
            if not INDEX_MIN <= value <= INDEX_MAX:
                raise self.error(
                    RangeError,
                    f"the integer {expr.text} in {what} does not fit in 64 bits, the widest "
                    f"index arithmetic polymap emits",
                    expr.loc,
                )
            return IConst(value)
        if isinstance(expr, S.SName):
            if expr.name in scope.indices or expr.name in self.params:
                return IVar(expr.name)
            if expr.name in scope.buffers:
                raise self.error(NotAffineError, _gather_misplaced(expr.name, what), expr.loc)
            if free is None:
                raise self.error(UndeclaredError, f"unknown name '{expr.name}' in {what}", expr.loc)
            free.add(expr.name)
            return IVar(expr.name)
        if isinstance(expr, S.SSubscript):
            if expr.name in scope.buffers:
                raise self.error(NotAffineError, _gather_misplaced(f"{expr.name}", what), expr.loc)
            raise self.undeclared_buffer(expr.name, expr.loc, scope)
        if isinstance(expr, S.SCall) and expr.fn in ("min", "max"):
            if not pieces:
                raise self.error(
                    NotAffineError,
                    f"{expr.fn}() in {what}: min and max may appear in loop extents, shapes and "
                    "conditions, not in an access's indices",
                    expr.loc,
                )
            if len(expr.args) != 2:
                raise self.error(
                    ArityError, f"{expr.fn}() in {what} takes 2 arguments, got {len(expr.args)}", expr.loc
                )
            lhs, rhs = (self.index(a, scope, free, what=what, pieces=True) for a in expr.args)
            return fold_index(IBin(IndexOp.MIN if expr.fn == "min" else IndexOp.MAX, lhs, rhs))
        if isinstance(expr, S.SCall):
            raise self.error(NotAffineError, f"function '{expr.fn}' cannot appear in {what}", expr.loc)
        if isinstance(expr, (S.SCompare, S.SLogic, S.SNot)):
            raise self.error(
                NotAffineError,
                f"a condition ('{_CONDITION_WORD[type(expr)]}') cannot appear in {what}",
                expr.loc,
            )
        if isinstance(expr, S.SNeg):
            inner = self.index(expr.operand, scope, free, what=what, pieces=pieces)
            return IConst(-inner.value) if isinstance(inner, IConst) else INeg(inner)
        if isinstance(expr, S.SInvert) or expr.op not in _INDEX_OPS:
            op = "~" if isinstance(expr, S.SInvert) else expr.op
            raise self.error(
                NotAffineError,
                f"'{op}' cannot appear in {what}: an index is quasi-affine (+ - * and // % by "
                f"constants); a bitwise operation is a value (for i >= 0, i & 1 is i % 2 and "
                f"i >> 2 is i // 4)",
                expr.loc,
            )
        lhs = self.index(expr.lhs, scope, free, what=what, pieces=pieces)
        rhs = self.index(expr.rhs, scope, free, what=what, pieces=pieces)
        return fold_index(IBin(_INDEX_OPS[expr.op], lhs, rhs))

    def read_index(self, expr: S.SExpr, scope: _Scope, free: _FreeNames | None) -> IndexExpr | Gather:
        """An index of a read: an index expression, or a gather, ``I[i]`` of a buffer (its own
        indices affine: gathers do not nest) or a 0-d buffer's name; ``validate`` checks that
        the buffer is an integer one of that many dimensions."""
        if isinstance(expr, S.SSubscript) and expr.name in scope.buffers:
            what = f"the index of '{expr.name}[...]', read as an index (a gather's indices are affine)"
            source = Read(
                expr.name, tuple(self.index(a, scope, free, what=what) for a in expr.args), expr.loc
            )
        elif (
            isinstance(expr, S.SName)
            and expr.name in scope.buffers
            and expr.name not in scope.indices
            and expr.name not in self.params
        ):
            source = Read(expr.name, (), expr.loc)
        else:
            return self.index(expr, scope, free)
        return Gather(source)  # its type and arity: validate's, as for programs built in Python

    def value(self, expr: S.SExpr, scope: _Scope, free: _FreeNames | None) -> ValueExpr:
        if isinstance(expr, S.SNum):
            if not expr.is_int:
                value = float(expr.text)
                if math.isinf(value):
                    raise self.error(RangeError, f"the number {expr.text} is too large for f64", expr.loc)
                return Const(value, expr.loc)
            value = int(expr.text)
            if not INDEX_MIN <= value <= INDEX_MAX:
                # Whether it must also fit in i32 depends on the statement's type: validate says.
                raise self.error(
                    RangeError,
                    f"the integer literal {expr.text} does not fit in 64 bits; write a large "
                    f"value as a float literal (e.g. 1e30)",
                    expr.loc,
                )
            return Const(value, expr.loc)
        if isinstance(expr, S.SName):
            decl = scope.buffers.get(expr.name)
            if decl is not None:
                if decl.shape:
                    raise self.error(
                        ArityError,
                        f"buffer '{decl.name}' has {len(decl.shape)} dimension(s) but is used "
                        f"without indices",
                        expr.loc,
                    )
                return Read(decl.name, (), expr.loc)
            if expr.name in FLOAT_NAMES and expr.name not in scope.indices and expr.name not in self.params:
                return Const(FLOAT_NAMES[expr.name], expr.loc)
            return IndexValue(self.index(expr, scope, free, what="a value"))
        if isinstance(expr, S.SSubscript):
            if expr.name not in scope.buffers:
                raise self.undeclared_buffer(expr.name, expr.loc, scope)
            return Read(expr.name, tuple(self.read_index(a, scope, free) for a in expr.args), expr.loc)
        if isinstance(expr, S.SCall) and expr.fn == SELECT:
            if len(expr.args) != 3:
                raise self.error(
                    ArityError,
                    f"select() takes 3 arguments (a condition, the value where it holds, the value "
                    f"where it does not), got {len(expr.args)}",
                    expr.loc,
                )
            cond, then, otherwise = expr.args
            return Select(
                self.condition(cond, scope, free),
                self.value(then, scope, free),
                self.value(otherwise, scope, free),
            )
        if isinstance(expr, (S.SCompare, S.SLogic, S.SNot)):
            # a condition as a value is 1 where it holds and 0 where not, as in C and Python;
            # the literals take the statement's type, as any other (1.0 in an f32 statement)
            usage = (
                "and, or, not join conditions: comparisons of values (< <= > >= == !=) or bool "
                "values (a read of a bool buffer, bool(x))"
            )
            return Select(self.condition(expr, scope, free, usage), Const(1, expr.loc), Const(0, expr.loc))
        if isinstance(expr, S.SCall):
            fn = _FUNCTIONS.get(expr.fn)
            if fn is None:
                known = ", ".join([*_FUNCTIONS, SELECT])
                raise self.error(UndeclaredError, f"unknown function '{expr.fn}' (known: {known})", expr.loc)
            if len(expr.args) != fn.arity:
                raise self.error(
                    ArityError, f"{fn.value}() takes {fn.arity} argument(s), got {len(expr.args)}", expr.loc
                )
            return Call(fn, tuple(self.value(a, scope, free) for a in expr.args))
        if isinstance(expr, S.SNeg):
            inner = self.value(expr.operand, scope, free)
            return Const(-inner.value, expr.loc) if isinstance(inner, Const) else Neg(inner)
        if isinstance(expr, S.SInvert):  # two's complement: ~x is x ^ -1 in any integer type
            return Binary(
                ValueOp.BITXOR, self.value(expr.operand, scope, free), Const(-1, expr.loc), expr.loc
            )
        if expr.op not in _VALUE_OPS:
            raise self.error(
                ProgramError, f"'{expr.op}' is allowed in index expressions only, not in values", expr.loc
            )
        return Binary(
            _VALUE_OPS[expr.op],
            self.value(expr.lhs, scope, free),
            self.value(expr.rhs, scope, free),
            expr.loc,
        )

    def condition(
        self, expr: S.SExpr, scope: _Scope, free: _FreeNames | None, usage: str | None = None
    ) -> Condition:
        """A condition: comparisons of values, joined by ``and``, ``or``, ``not``; ``usage``
        is the error where ``expr`` is none (by default, select's)."""
        if isinstance(expr, S.SCompare):
            return Compare(
                _COMPARISONS[expr.op], self.value(expr.lhs, scope, free), self.value(expr.rhs, scope, free)
            )
        if isinstance(expr, S.SLogic):
            op = LogicOp(expr.op)
            lhs, rhs = (self.condition(e, scope, free, usage) for e in (expr.lhs, expr.rhs))
            return Logic(op, lhs, rhs)
        if isinstance(expr, S.SNot):
            return Not(self.condition(expr.operand, scope, free, usage))
        if self.is_boolean(expr, scope):  # a mask: it holds where the value is not 0
            return Compare(CmpOp.NE, self.value(expr, scope, free), Const(0, expr.loc))
        raise self.error(
            ProgramError,
            usage
            or "select's first argument must be a condition: a comparison of values (< <= > >= == !=), "
            "or conditions joined by and, or, not, or a bool value (a read of a bool buffer, bool(x))",
            expr.loc,
        )

    @staticmethod
    def is_boolean(expr: S.SExpr, scope: _Scope) -> bool:
        """Whether ``expr`` is a bool value that may stand as a condition: a read of a bool
        buffer or a conversion ``bool(x)``. Other values may not (``if i``, ``select(x[i],
        ...)`` with a float ``x`` are more likely slips than meant as ``!= 0``)."""
        if isinstance(expr, S.SCall):
            return expr.fn == DType.BOOL.value
        name = expr.name if isinstance(expr, (S.SSubscript, S.SName)) else None
        decl = scope.buffers.get(name) if name is not None else None
        return decl is not None and decl.dtype is DType.BOOL
