"""Printing isl AST nodes and expressions as C.

isl's own printer knows nothing of our helpers, our types or our statements; this one
prints every expression with C precedence (no parentheses where none are needed), integer
floor division through ``pm_floord`` (isl's ``floord`` is a floor, C's ``/`` truncates),
and hands each leaf ``S(e_0, .., e_d)`` to a callback that prints the statement."""

from __future__ import annotations

from collections.abc import Callable

import islpy as isl

from polymap.codegen.cexpr import negate
from polymap.errors import InternalError

_OP = isl.ast_expr_op_type
_T = isl.ast_expr_type
_N = isl.ast_node_type

# (C operator, precedence) of the binary operators; higher binds tighter.
_BINARY = {
    _OP.add: ("+", 12), _OP.sub: ("-", 12), _OP.mul: ("*", 13), _OP.div: ("/", 13), _OP.pdiv_q: ("/", 13),
    _OP.pdiv_r: ("%", 13), _OP.zdiv_r: ("%", 13), _OP.eq: ("==", 9), _OP.le: ("<=", 10), _OP.lt: ("<", 10),
    _OP.ge: (">=", 10), _OP.gt: (">", 10), _OP.and_: ("&&", 5), _OP.and_then: ("&&", 5), _OP.or_: ("||", 4),
    _OP.or_else: ("||", 4),
}
_ATOM, _UNARY, _COND = 16, 15, 3


class AstPrinter:
    """``names`` maps isl identifiers to C; ``leaf(name, args)`` prints a statement
    instance (a list of C lines) given its isl tuple name and index expressions."""

    def __init__(
        self, names: Callable[[str], str], leaf: Callable[[str, list[str]], list[str]], unroll=frozenset()
    ) -> None:
        self.names = names
        self.leaf = leaf
        self.unroll = unroll  # iterators whose loops the compiler should unroll (a thread's s_j)

    # -- expressions

    def expr(self, e: isl.AstExpr) -> str:
        return self._expr(e)[0]

    def _expr(self, e: isl.AstExpr) -> tuple[str, int]:
        kind = e.get_type()
        if kind == _T.id:
            return self.names(e.get_id().get_name()), _ATOM
        if kind == _T.int:
            value = int(e.get_val().to_python())
            return str(value), _ATOM if value >= 0 else _UNARY
        if kind != _T.op:
            raise InternalError(f"unexpected isl AST expression {e.to_C_str()}")
        op = e.get_op_type()
        args = [e.get_op_arg(k) for k in range(e.get_op_n_arg())]
        if op in _BINARY:
            sym, prec = _BINARY[op]
            lhs, lp = self._expr(args[0])
            rhs, rp = self._expr(args[1])
            return f"{_paren(lhs, lp, prec)} {sym} {_paren(rhs, rp, prec + 1)}", prec
        if op == _OP.minus:
            text, prec = self._expr(args[0])
            return negate(text, prec), _UNARY
        if op in (_OP.max, _OP.min, _OP.fdiv_q):
            fn = {_OP.max: "pm_max", _OP.min: "pm_min", _OP.fdiv_q: "pm_floord"}[op]
            text = self.expr(args[0])
            for arg in args[1:]:  # isl's max/min are n-ary
                text = f"{fn}({text}, {self.expr(arg)})"
            return text, _ATOM
        if op in (_OP.cond, _OP.select):
            c, t, f = (self._expr(a) for a in args)
            return f"{_paren(c[0], c[1], _COND + 1)} ? {t[0]} : {_paren(f[0], f[1], _COND)}", _COND
        raise InternalError(f"unexpected isl AST operation in {e.to_C_str()}")

    # -- statements

    def node(self, node: isl.AstNode, indent: int) -> list[str]:
        pad = "  " * indent
        kind = node.get_type()
        if kind == _N.block:
            children = node.block_get_children()
            return [line for k in range(children.n_ast_node()) for line in self.node(children.get_at(k), indent)]
        if kind == _N.for_:
            it = self.expr(node.for_get_iterator())
            init = self.expr(node.for_get_init())
            body = self.node(node.for_get_body(), indent + 1)
            if node.for_is_degenerate():
                return [f"{pad}{{", f"{pad}  const int {it} = {init};", *body, f"{pad}}}"]
            cond = self.expr(node.for_get_cond())
            inc = self.expr(node.for_get_inc())
            step = f"++{it}" if inc == "1" else f"{it} += {inc}"
            pragma = [f"{pad}#pragma unroll"] if it in self.unroll else []
            return [*pragma, f"{pad}for (int {it} = {init}; {cond}; {step}) {{", *body, f"{pad}}}"]
        if kind == _N.if_:
            lines = [f"{pad}if ({self.expr(node.if_get_cond())}) {{", *self.node(node.if_get_then_node(), indent + 1)]
            if node.if_has_else_node():
                lines += [f"{pad}}} else {{", *self.node(node.if_get_else_node(), indent + 1)]
            return lines + [f"{pad}}}"]
        if kind == _N.user:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            args = [self.expr(call.get_op_arg(k)) for k in range(1, call.get_op_n_arg())]
            return [pad + line for line in self.leaf(name, args)]
        if kind == _N.mark:
            return self.node(node.mark_get_node(), indent)
        raise InternalError(f"unexpected isl AST node {node.to_C_str()}")


def _paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text
