"""Printing isl AST nodes and expressions as C.

isl's own printer knows nothing of our helpers, our types or our statements; this one
prints every expression with C precedence (no parentheses where none are needed), integer
floor division through ``pm_floord`` (isl's ``floord`` is a floor, C's ``/`` truncates),
and hands each leaf ``S(e_0, .., e_d)`` to a callback that prints the statement.

Every expression is printed in the narrowest C integer type that holds all of its
intermediate values (``ranges.py``): the printer is given the range of every identifier
(from isl) and bounds each sub-expression by interval arithmetic; an expression that may
leave ``int`` is printed in ``long long``, a loop whose iterator may leave ``int`` declares
it ``long long``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import islpy as isl

from polymap.codegen.cexpr import negate
from polymap.errors import InternalError
from polymap.schedule.ranges import BOOL, Interval, require64

_OP = isl.ast_expr_op_type
_T = isl.ast_expr_type
_N = isl.ast_node_type

# (C operator, precedence) of the binary operators; higher binds tighter.
_BINARY = {
    _OP.add: ("+", 12),
    _OP.sub: ("-", 12),
    _OP.mul: ("*", 13),
    _OP.div: ("/", 13),
    _OP.pdiv_q: ("/", 13),
    _OP.pdiv_r: ("%", 13),
    _OP.zdiv_r: ("%", 13),
    _OP.eq: ("==", 9),
    _OP.le: ("<=", 10),
    _OP.lt: ("<", 10),
    _OP.ge: (">=", 10),
    _OP.gt: (">", 10),
    _OP.and_: ("&&", 5),
    _OP.and_then: ("&&", 5),
    _OP.or_: ("||", 4),
    _OP.or_else: ("||", 4),
}
_ATOM, _UNARY, _COND = 16, 15, 3
_AND = _BINARY[_OP.and_][1]


class AstPrinter:
    """``names`` maps isl identifiers to C; ``leaf(name, args, key)`` prints a statement
    instance (a list of C lines) given its isl tuple name, index expressions (isl AST
    expressions, which ``expr`` prints) and the key
    of the leaf's annotation (None when it has none); ``ranges`` gives the range of every
    isl identifier an expression may mention (``ranges.set_ranges``)."""

    def __init__(
        self,
        names: Callable[[str], str],
        leaf: Callable[[str, list[str], str | None], list[str]],
        ranges: Mapping[str, Interval] | None = None,
    ) -> None:
        self.names = names
        self.leaf = leaf
        self.ranges = dict(ranges or {})
        # isl iterators printed as loops of constant bounds, the compiler to unroll them:
        # each with the least and greatest value it takes (``KernelSchedule.point_boxes``)
        self.boxes: Mapping[str, tuple[int, int]] = {}
        # where set, the guards of the boxed loops inside another loop are read from a mask
        # of the thread's live points computed once (``LiveMasks``)
        self.live_masks: LiveMasks | None = None
        self._loops = 0  # loops not boxed around the node being printed

    # -- expressions

    def expr(self, e: isl.AstExpr) -> str:
        """C text of an expression; a sub-expression whose value may leave ``int`` is
        computed in ``long long`` (one operand widened, C's conversions do the rest)."""
        return self.expr_and_interval(e)[0]

    def expr_and_interval(self, e: isl.AstExpr) -> tuple[str, Interval]:
        """``expr``'s text and the range of the expression's value, from one walk of it;
        raises where some sub-expression may leave 64 bits."""
        found: list[Interval] = []
        text, _, _, interval = self._expr(e, found)
        for each in found:
            require64(each, f"the expression {e.to_C_str()}")
        return text, interval

    def _leaf_interval(self, e: isl.AstExpr) -> Interval:
        if e.get_type() == _T.int:
            return Interval.point(int(e.get_val().to_python()))
        name = e.get_id().get_name()
        if name not in self.ranges:
            raise InternalError(f"no range known for the isl identifier {name}")
        return self.ranges[name]

    @staticmethod
    def _op_interval(e: isl.AstExpr, vals: list[Interval]) -> Interval:
        """The interval of an operation from those of its operands."""
        op = e.get_op_type()
        if op == _OP.add:
            return vals[0] + vals[1]
        if op == _OP.sub:
            return vals[0] - vals[1]
        if op == _OP.mul:
            return vals[0] * vals[1]
        if op == _OP.minus:
            return -vals[0]
        if op in (_OP.div, _OP.pdiv_q, _OP.fdiv_q, _OP.pdiv_r, _OP.zdiv_r):
            d = vals[1]
            if d.lo is None or d.lo != d.hi or d.lo <= 0:
                raise InternalError(f"isl divides by a non-constant in {e.to_C_str()}")
            if op == _OP.zdiv_r:
                return vals[0].rem(d.lo)
            if op == _OP.pdiv_r:
                return vals[0].mod(d.lo)
            return vals[0].floordiv(d.lo)  # div and pdiv_q are exact or of a non-negative dividend
        if op in (_OP.max, _OP.min):
            out = vals[0]
            for v in vals[1:]:
                out = out.max_with(v) if op == _OP.max else out.min_with(v)
            return out
        if op in (_OP.cond, _OP.select):
            return vals[1].join(vals[2])
        if op in _BINARY:  # comparisons and logic
            return BOOL
        raise InternalError(f"unexpected isl AST operation in {e.to_C_str()}")

    def _expr(self, e: isl.AstExpr, found: list[Interval]) -> tuple[str, int, bool, Interval]:
        """(text, precedence, whether its C type is ``long long``, its interval); appends the
        interval of ``e`` and of every sub-expression to ``found`` (each computed once, from
        its operands')."""
        kind = e.get_type()
        if kind == _T.id:
            interval = self._leaf_interval(e)
            found.append(interval)
            return self.names(e.get_id().get_name()), _ATOM, False, interval
        if kind == _T.int:
            interval = self._leaf_interval(e)
            found.append(interval)
            value = int(e.get_val().to_python())
            wide = not interval.fits32
            return f"{value}LL" if wide else str(value), _ATOM if value >= 0 else _UNARY, wide, interval
        if kind != _T.op:
            raise InternalError(f"unexpected isl AST expression {e.to_C_str()}")
        op = e.get_op_type()
        full = [self._expr(e.get_op_arg(k), found) for k in range(e.get_op_n_arg())]
        interval = self._op_interval(e, [a[3] for a in full])
        found.append(interval)
        args = [a[:3] for a in full]
        text, prec, wide = self._op_text(op, args, not interval.fits32, e)
        return text, prec, wide, interval

    def _op_text(self, op, args: list[tuple[str, int, bool]], overflow: bool, e: isl.AstExpr):
        """(text, precedence, wide) of an operation on printed operands; ``overflow``: its
        value may leave ``int``, so it is computed in long long (one operand widened where
        none is already wide: C converts the other)."""
        if op in _BINARY:
            sym, prec = _BINARY[op]
            (lhs, lp, lw), (rhs, rp, rw) = args
            if overflow and not (lw or rw):
                lhs, lp, lw = _widen(lhs, lp), _UNARY, True
            # an && inside an || in parentheses though C needs none: compilers warn otherwise
            # (-Wparentheses, in g++'s and nvcc's -Wall)
            left, right = prec, prec + 1
            if sym == "||":
                left, right = (_AND + 1 if lp == _AND else left), (_AND + 1 if rp == _AND else right)
            return f"{_paren(lhs, lp, left)} {sym} {_paren(rhs, rp, right)}", prec, lw or rw
        if op == _OP.minus:
            text, prec, wide = args[0]
            if overflow and not wide:
                text, prec, wide = _widen(text, prec), _UNARY, True
            return negate(text, prec), _UNARY, wide
        if op in (_OP.max, _OP.min, _OP.fdiv_q):
            fn = {_OP.max: "pm_max", _OP.min: "pm_min", _OP.fdiv_q: "pm_floord"}[op]
            # the helpers are overloaded per type: every argument of one type
            wide = overflow or any(w for _, _, w in args)
            texts = [_widen(t, p) if wide and not w else t for t, p, w in args]
            text = texts[0]
            for arg in texts[1:]:  # isl's max/min are n-ary
                text = f"{fn}({text}, {arg})"
            return text, _ATOM, wide
        if op in (_OP.cond, _OP.select):
            c, t, f = args
            wide = overflow or t[2] or f[2]
            t_text = _widen(t[0], t[1]) if wide and not t[2] else t[0]
            f_text, f_prec = (_widen(f[0], f[1]), _UNARY) if wide and not f[2] else (f[0], f[1])
            return (
                f"{_paren(c[0], c[1], _COND + 1)} ? {t_text} : {_paren(f_text, f_prec, _COND)}",
                _COND,
                wide,
            )
        raise InternalError(f"unexpected isl AST operation in {e.to_C_str()}")

    def c_type(self, name: str) -> str:
        """The C type of an iterator: ``int`` where its range fits, else ``long long``."""
        interval = self.ranges.get(name)
        if interval is None:
            raise InternalError(f"no range known for the iterator {name}")
        require64(interval, f"the loop iterator {name}")
        return "int" if interval.fits32 else "long long"

    # -- statements

    def node(self, node: isl.AstNode, indent: int) -> list[str]:
        pad = "  " * indent
        kind = node.get_type()
        if kind == _N.block:
            children = node.block_get_children()
            return [
                line for k in range(children.n_ast_node()) for line in self.node(children.get_at(k), indent)
            ]
        if kind == _N.for_:
            iterator = node.for_get_iterator().get_id().get_name()
            box = self.boxes.get(iterator)
            if box is not None:
                return self._boxed_loop(node, iterator, box, indent)
            it, c_type = self.names(iterator), self.c_type(iterator)
            init = self.expr(node.for_get_init())
            self._loops += not node.for_is_degenerate()
            try:
                body = self.node(node.for_get_body(), indent + 1)
            finally:
                self._loops -= not node.for_is_degenerate()
            if node.for_is_degenerate():
                return [f"{pad}{{", f"{pad}  const {c_type} {it} = {init};", *body, f"{pad}}}"]
            cond = self.expr(node.for_get_cond())
            inc = self.expr(node.for_get_inc())
            step = f"++{it}" if inc == "1" else f"{it} += {inc}"
            return [f"{pad}for ({c_type} {it} = {init}; {cond}; {step}) {{", *body, f"{pad}}}"]
        if kind == _N.if_:
            lines = [
                f"{pad}if ({self.expr(node.if_get_cond())}) {{",
                *self.node(node.if_get_then_node(), indent + 1),
            ]
            if node.if_has_else_node():
                lines += [f"{pad}}} else {{", *self.node(node.if_get_else_node(), indent + 1)]
            return lines + [f"{pad}}}"]
        if kind == _N.user:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            args = [call.get_op_arg(k) for k in range(1, call.get_op_n_arg())]
            annotation = node.get_annotation()
            key = None if annotation is None else annotation.get_name()
            return [pad + line for line in self.leaf(name, args, key)]
        if kind == _N.mark:
            return self.node(node.mark_get_node(), indent)
        raise InternalError(f"unexpected isl AST node {node.to_C_str()}")

    def _boxed_loop(self, node: isl.AstNode, iterator: str, box: tuple[int, int], indent: int) -> list[str]:
        """isl's loop ``node`` over ``box`` (the least and greatest value its iterator takes
        anywhere) with constant bounds, under ``POLYMAP_UNROLL``, and isl's own bounds as a
        guard around the body where they say more than the box (an edge block's points): the
        same iterations, in a loop the compiler unrolls, so that a per-point buffer indexed
        by the iterator is indexed by constants and stays in registers."""
        if self.live_masks is not None and self._loops:
            masked = self._masked_nest(node, indent)
            if masked is not None:
                return masked
        guards = self._box_guards(node, iterator, box)
        body = self.node(node.for_get_body(), indent + 1 + bool(guards))
        if guards:
            pad = "  " * indent
            body = [f"{pad}  if ({self.expr(_conjunction(guards))}) {{", *body, f"{pad}  }}"]
        return self._box_lines(iterator, box, body, indent)

    def _box_lines(self, iterator: str, box: tuple[int, int], body: list[str], indent: int) -> list[str]:
        """``body`` inside a loop of ``iterator`` over ``box`` the compiler unrolls (a block
        with the iterator a constant where the box has one value)."""
        pad = "  " * indent
        it, c_type = self.names(iterator), self.c_type(iterator)
        lo, hi = box
        if lo == hi:
            return [f"{pad}{{", f"{pad}  const {c_type} {it} = {lo};", *body, f"{pad}}}"]
        loop = f"{pad}for ({c_type} {it} = {lo}; {it} <= {hi}; ++{it}) {{"
        return [f"{pad}POLYMAP_UNROLL", loop, *body, f"{pad}}}"]

    @staticmethod
    def _box_guards(node: isl.AstNode, iterator: str, box: tuple[int, int]) -> list[isl.AstExpr]:
        """isl's bounds of the loop ``node`` that say more than ``box``: the conditions a
        boxed loop puts around its body."""
        lo, hi = box
        at, init = node.for_get_iterator(), node.for_get_init()
        if node.for_is_degenerate():  # one value: the iterator equals isl's init
            return [] if _is_int(init, lo) and lo == hi else [at.eq(init)]
        cond, inc = node.for_get_cond(), node.for_get_inc()
        guards = [] if _is_int(init, lo) else [at.ge(init)]
        if not _is_bound(cond, iterator, hi):
            guards.append(cond)
        if not _is_int(inc, 1):  # isl's stride: every inc-th value from init (past it: &&)
            if not guards:
                guards.append(at.ge(init))
            guards.append(at.sub(init).pdiv_r(inc).eq(isl.AstExpr.from_val(isl.Val(0))))
        return guards

    def _masked_nest(self, node: isl.AstNode, indent: int) -> list[str] | None:
        """A nest of boxed loops inside another loop (a thread's points inside a reduction
        loop), its guards read from a mask of the thread's live points: one bit per point,
        set where every guard of the nest holds, computed once where the printed code starts
        (``LiveMasks``). The same points run, the same guards decide it; but the compiler,
        which hoists each point's guard out of the loop around the nest, keeps one mask in
        registers instead of a flag per point (batched_matmul: 208 registers with the flags,
        126 with the mask; record 2026-11-29-live-point-masks). None where the nest's guards
        depend on more than the sizes, the block, the thread and the nest's own iterators,
        where it has no guard, or more than 64 points."""
        chain: list[tuple[str, tuple[int, int], list[isl.AstExpr]]] = []
        known = set(self.live_masks.invariant)
        while True:
            iterator = node.for_get_iterator().get_id().get_name()
            box = self.boxes[iterator]
            known.add(iterator)
            guards = self._box_guards(node, iterator, box)
            inner = node.for_get_body()
            # isl's conditions between this loop and the next (an ``if`` without ``else``)
            # join the loop's guards where they too depend on the point alone
            while (
                inner.get_type() == _N.if_
                and not inner.if_has_else_node()
                and _ids(inner.if_get_cond()) <= known
            ):
                guards.append(inner.if_get_cond())
                inner = inner.if_get_then_node()
            chain.append((iterator, box, guards))
            if inner.get_type() != _N.for_ or inner.for_get_iterator().get_id().get_name() not in self.boxes:
                break
            node = inner
        if not any(guards for _, _, guards in chain):
            return None
        if not all(_ids(g) <= known for _, _, guards in chain for g in guards):
            return None
        points = 1
        for _, (lo, hi), _ in chain:
            points *= hi - lo + 1
        if points > 64:
            return None
        bit = self._point_bit(chain)
        mask = self.live_masks.mask(self, chain, bit)
        pad = "  " * (indent + len(chain))
        body = self.node(inner, indent + len(chain) + 1)
        lines = [f"{pad}if (({mask} >> ({bit})) & 1ULL) {{", *body, f"{pad}}}"]
        for k in reversed(range(len(chain))):
            iterator, box, _ = chain[k]
            lines = self._box_lines(iterator, box, lines, indent + k)
        return lines

    def _point_bit(self, chain) -> str:
        """The C expression of a point's bit in a mask over the nest ``chain``: the points in
        the nest's order, the innermost loop's neighbours adjacent."""
        terms, stride = [], 1
        for iterator, (lo, hi), _ in reversed(chain):
            it = self.names(iterator)
            term = f"({it} - {lo})" if lo else it
            terms.append(term if stride == 1 else f"{stride} * {term}")
            stride *= hi - lo + 1
        return " + ".join(reversed(terms))


class LiveMasks:
    """The masks of live points of one printed path of a kernel (``AstPrinter._masked_nest``):
    ``invariant`` are the isl names fixed over the whole path (sizes, host indices, block
    and thread coordinates), which a guard may mention; ``fresh`` gives a C name no other
    name of the kernel has. A nest with the same loops and guards shares a mask."""

    def __init__(self, invariant: frozenset[str], fresh: Callable[[str], str]) -> None:
        self.invariant = invariant
        self.fresh = fresh
        self._names: dict[tuple, str] = {}
        self._lines: list[str] = []

    def mask(self, printer: AstPrinter, chain, bit: str) -> str:
        """The name of the mask of ``chain`` (defining it the first time): a loop nest over
        the nest's boxes that sets a point's bit where every guard of the nest holds, each
        guard evaluated where the nest evaluates it (inside the guards of the loops around)."""
        texts = tuple((it, box, tuple(printer.expr(g) for g in guards)) for it, box, guards in chain)
        if texts in self._names:
            return self._names[texts]
        name = self.fresh("live")

        def nest(k: int, depth: int) -> list[str]:
            pad = "  " * depth
            if k == len(chain):
                return [f"{pad}{name} |= 1ULL << ({bit});"]
            iterator, (lo, hi), guards = chain[k]
            inner = nest(k + 1, depth + 1 + bool(guards))
            if guards:
                inner = [f"{pad}  if ({printer.expr(_conjunction(guards))}) {{", *inner, f"{pad}  }}"]
            it, c_type = printer.names(iterator), printer.c_type(iterator)
            return [f"{pad}for ({c_type} {it} = {lo}; {it} <= {hi}; ++{it}) {{", *inner, f"{pad}}}"]

        body = nest(0, 0)
        note = "// a bit per point of the thread: its guards hold (read inside the loops below)"
        self._lines += [f"unsigned long long {name} = 0;  {note}", *body]
        self._names[texts] = name
        return name

    def take(self, indent: int) -> list[str]:
        """The masks' definitions made since the last call, indented by ``indent``: the next
        path (a kernel's code for full blocks, then for the others) defines its own."""
        lines, self._lines, self._names = self._lines, [], {}
        return ["  " * indent + line for line in lines]


def _conjunction(guards: list[isl.AstExpr]) -> isl.AstExpr:
    guard = guards[0]
    for more in guards[1:]:
        guard = guard.and_(more)
    return guard


def _ids(e: isl.AstExpr) -> set[str]:
    """The isl identifiers an AST expression mentions."""
    kind = e.get_type()
    if kind == _T.id:
        return {e.get_id().get_name()}
    if kind == _T.op:
        return set().union(*(_ids(e.get_op_arg(k)) for k in range(e.get_op_n_arg())))
    return set()


def _is_int(e: isl.AstExpr, value: int) -> bool:
    """Whether ``e`` is the integer ``value``."""
    return e.get_type() == _T.int and int(e.get_val().to_python()) == value


def _is_bound(cond: isl.AstExpr, iterator: str, hi: int) -> bool:
    """Whether ``cond`` is ``iterator <= hi`` (or ``iterator < hi + 1``)."""
    if cond.get_type() != _T.op or cond.get_op_type() not in (_OP.le, _OP.lt):
        return False
    left, right = cond.get_op_arg(0), cond.get_op_arg(1)
    bound = hi if cond.get_op_type() == _OP.le else hi + 1
    return left.get_type() == _T.id and left.get_id().get_name() == iterator and _is_int(right, bound)


def _widen(text: str, prec: int) -> str:
    """``text`` converted to ``long long``."""
    if text.lstrip("-").isdigit():
        return f"{text}LL"
    return f"(long long){_paren(text, prec, _UNARY)}"


def _paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text
