"""Parsing TE text: ``parse(text) -> Program`` and ``load(path) -> Program``.

Grammar (statements end at a newline or ``;``; newlines inside ``()``/``[]`` are ignored)::

    program  := item*
    item     := 'param' pdecl (',' pdecl)*  |  decl  |  stmt
    pdecl    := NAME ('=' expr)?
    decl     := ('in' | 'out' | 'inout' | 'new') NAME ':' DTYPE ('[' (expr (',' expr)*)? ']')?
    stmt     := ('par' | 'seq') expr NAME '{' (stmt | decl)* '}'
              | 'atomic'? target ASSIGN expr          ASSIGN := = += -= *= max= min=
              | 'anchor' expr
    target   := NAME ('[' (expr (',' expr)*)? ']')?
    expr     := term (('+' | '-') term)*
    term     := unary (('*' | '/' | '//' | '%') unary)*
    unary    := '-' unary | atom
    atom     := NUMBER | NAME | NAME '[' args ']' | NAME '(' args ')' | '(' expr ')'

Index and value expressions share one syntax here; lowering tells them apart.

Limits. Every later stage (lowering, validation, the isl text, the printer, the reference
executor, the C printer) walks expressions and loop nests recursively, so the parser
bounds how deep they may nest, well below Python's recursion limit, and says so with a
ParseError at the line:col where the limit is crossed instead of a RecursionError later:

* an expression nests at most ``nodes.MAX_EXPR_NESTING`` levels: operators (``a + b + c`` is
  two levels, as it is evaluated left to right), unary minus signs, parentheses, brackets
  and calls all count;
* loops nest at most ``nodes.MAX_LOOP_NESTING`` deep, and a buffer has at most
  ``nodes.MAX_RANK`` dimensions;
* an integer literal has at most :data:`MAX_INT_DIGITS` digits (the value range of its
  use, i32 or 64-bit index arithmetic, is checked by lowering and validation).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from polymap.errors import ArgumentError, ParseError, PolymapError
from polymap.ir.lexer import Tok, Token, tokenize
from polymap.ir.nodes import MAX_EXPR_NESTING, MAX_LOOP_NESTING, MAX_RANK, Program
from polymap.ir.syntax import (
    SAnchor,
    SAssign,
    SAssume,
    SBinary,
    SCall,
    SCompare,
    SDecl,
    SExpr,
    SIf,
    SInvert,
    SLogic,
    SLoop,
    SName,
    SNeg,
    SNot,
    SNum,
    SParam,
    SStmt,
    SSubscript,
)

ASSIGN_OPS = ("=", "+=", "-=", "*=", "/=", "max=", "min=")
DECL_KINDS = ("in", "out", "inout", "new")
KEYWORDS = frozenset(
    ("param", "par", "seq", "anchor", "assume", "if", "else", "and", "or", "not", "atomic", *DECL_KINDS)
)
COMPARISONS = frozenset(("<", "<=", ">", ">=", "==", "!="))
# the binary operators by level, loosest first, as Python binds them: a comparison is looser
# than all of them (``x & 1 == 0`` is ``(x & 1) == 0``, where C would read ``x & (1 == 0)``)
BINARY_LEVELS = (("|",), ("^",), ("&",), ("<<", ">>"), ("+", "-"), ("*", "/", "//", "%"))
_LEVEL = {op: level for level, ops in enumerate(BINARY_LEVELS) for op in ops}

# 2**63 has 19 digits: a longer literal can be neither an i32 nor a 64-bit index constant,
# and Python refuses to convert a string of more than 4300 digits at all.
MAX_INT_DIGITS = 40


def parse(text: str, *, name: str | None = None, source: str | None = None) -> Program:
    """Parse TE text into a checked :class:`Program`.

    ``name`` names the program (default: the file stem of ``source``, else ``program``);
    ``source`` is the file name used in error messages. Raises a ParseError for syntax
    errors and a ProgramError subclass for invalid programs, both with line:col."""
    from polymap.ir.lower import lower

    if not isinstance(text, str):
        hint = " (to read a file, use polymap.load(path))" if isinstance(text, Path) else ""
        raise ArgumentError(f"parse() takes the program text as a str, got {type(text).__name__}{hint}")
    for keyword, value in (("name", name), ("source", source)):
        if value is not None and not isinstance(value, str):
            raise ArgumentError(f"parse() takes {keyword}= as a str, got {type(value).__name__}")
    if name is not None and not name.strip():
        raise ArgumentError("parse() takes a non-empty name=")
    source = source or "<string>"
    items = _Parser(tokenize(text, source=source), source, text).program()
    program_name = name or (Path(source).stem if source != "<string>" else "program")
    return lower(items, name=program_name, source=source, text=text)


def load(path: str | Path) -> Program:
    """Read and parse a ``.te`` file; errors name the file with line:col."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise ArgumentError(
            f"load() takes the path of a .te file as a str or a Path, got {type(path).__name__}"
        )
    try:
        path = Path(path)
    except TypeError as err:  # a PathLike whose __fspath__ gives no str
        raise ArgumentError(f"load() cannot use {path!r} as a path: {err}") from None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as err:  # ValueError: a NUL in the path
        raise ArgumentError(f"cannot read program file {str(path)!r}: {err}") from None
    return parse(text, name=path.stem, source=str(path))


class _Parser:
    def __init__(self, tokens: list[Token], source: str, text: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.source = source
        self.text = text
        self.nesting = 0  # open parentheses, brackets, calls and unary signs being parsed
        self.loop_nesting = 0

    # -- token helpers

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tok
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def at(self, text: str) -> bool:
        return self.tok.kind in (Tok.OP, Tok.NAME) and self.tok.text == text

    def error(self, message: str, token: Token | None = None) -> PolymapError:
        token = token or self.tok
        return ParseError(message, loc=token.loc, source=self.source, text=self.text)

    def expect(self, text: str, what: str | None = None) -> Token:
        if not self.at(text):
            raise self.error(f"expected '{text}'{what or ''} but found {self.tok.describe()}")
        return self.advance()

    def expect_name(self, what: str) -> Token:
        if self.tok.kind is not Tok.NAME:
            raise self.error(f"expected {what} but found {self.tok.describe()}")
        if self.tok.text in KEYWORDS:
            raise self.error(f"'{self.tok.text}' is a keyword and cannot be used as {what}")
        return self.advance()

    def skip_separators(self) -> None:
        while self.tok.kind is Tok.NEWLINE or self.at(";"):
            self.advance()

    def end_statement(self) -> None:
        if self.tok.kind in (Tok.NEWLINE, Tok.EOF) or self.at(";") or self.at("}"):
            return
        raise self.error(
            f"expected the end of the statement (a newline or ';') but found {self.tok.describe()}"
        )

    # -- statements

    def program(self) -> tuple[SStmt, ...]:
        items = self.block(top_level=True)
        if self.tok.kind is not Tok.EOF:
            raise self.error(f"unexpected {self.tok.describe()}: no block is open here")
        return items

    def block(self, *, top_level: bool) -> tuple[SStmt, ...]:
        items: list[SStmt] = []
        while True:
            self.skip_separators()
            if self.tok.kind is Tok.EOF or self.at("}"):
                return tuple(items)
            items.extend(self.item(top_level=top_level))
            self.end_statement()

    def item(self, *, top_level: bool) -> list[SStmt]:
        word = self.tok.text if self.tok.kind is Tok.NAME else None
        if word == "param":
            if not top_level:
                raise self.error("size parameters are declared at top level, not inside a loop")
            return self.params()
        if word in DECL_KINDS and self.peek().kind is Tok.NAME:
            if word != "new" and not top_level:
                raise self.error(
                    f"'{word}' buffers are declared at top level; only 'new' may appear in a block"
                )
            return [self.decl()]
        if word in ("par", "seq"):
            return [self.loop()]
        if word == "if":
            return [self.if_block()]
        if word == "else":
            raise self.error(
                "'else' without an 'if' just before it: an else goes on the line of its if's closing '}'"
            )
        if word == "anchor":
            loc = self.advance().loc
            return [SAnchor(self.expr(), loc)]
        if word == "atomic":
            loc = self.advance().loc
            if self.tok.kind is not Tok.NAME or self.tok.text in KEYWORDS:
                raise self.error(
                    f"expected an update after 'atomic' (like 'atomic s[0] += x[i]') but found {self.tok.describe()}"
                )
            return [replace(self.assign(), atomic=True, loc=loc)]
        if word == "assume":
            if not top_level:
                raise self.error("'assume' states the sizes a program is valid for: it belongs at top level")
            loc = self.advance().loc
            return [SAssume(self.expr(), loc)]
        return [self.assign()]

    def params(self) -> list[SStmt]:
        self.advance()
        found = []
        while True:
            name = self.expect_name("a size name")
            default = None
            if self.at("="):
                self.advance()
                default = self.expr()
            found.append(SParam(name.text, default, name.loc))
            if not self.at(","):
                return found
            self.advance()

    def decl(self) -> SDecl:
        kind = self.advance()
        name = self.expect_name("a buffer name")
        self.expect(":", f" after buffer name '{name.text}'")
        dtype = self.expect_name("a dtype (f32, f64, i32, f16, bf16, i8, u8, i64 or bool)")
        shape: tuple[SExpr, ...] = ()
        if self.at("["):
            bracket = self.tok
            shape = self.arguments("[", "]")
            if len(shape) > MAX_RANK:
                raise self.error(
                    f"buffer '{name.text}' has {len(shape)} dimensions; polymap allows at most {MAX_RANK}",
                    bracket,
                )
        return SDecl(kind.text, name.text, dtype.text, dtype.loc, shape, kind.loc)

    def loop(self) -> SLoop:
        if self.loop_nesting >= MAX_LOOP_NESTING:
            raise self.error(f"loops nest more than {MAX_LOOP_NESTING} deep (polymap's limit)")
        kind = self.advance()
        if self.tok.kind is Tok.NAME and self.peek().text == "{":
            raise self.error(
                f"'{kind.text}' needs an extent and an index, e.g. '{kind.text} N {self.tok.text} {{'; "
                f"found only '{self.tok.text}'"
            )
        extent = self.expr()
        if self.at("{"):
            raise self.error(
                f"'{kind.text}' needs an extent and an index, e.g. '{kind.text} N i {{'; "
                f"found no index name before '{{'"
            )
        index = self.expect_name("a loop index name after the extent")
        self.expect("{", f" to open the body of {kind.text} loop '{index.text}'")
        self.loop_nesting += 1
        body = self.block(top_level=False)
        self.loop_nesting -= 1
        self.expect("}", f" to close {kind.text} loop '{index.text}' opened at {kind.loc}")
        return SLoop(kind.text, extent, index.text, index.loc, body, kind.loc)

    def if_block(self) -> SIf:
        start = self.advance()
        cond = self.expr()
        self.expect("{", " to open the body of 'if'")
        then = self.block(top_level=False)
        self.expect("}", f" to close the 'if' opened at {start.loc}")
        otherwise: tuple[SStmt, ...] = ()
        if self.at("else"):
            self.advance()
            if self.at("if"):
                otherwise = (self.if_block(),)
            else:
                self.expect("{", " to open the body of 'else'")
                otherwise = self.block(top_level=False)
                self.expect("}", f" to close the 'else' of the 'if' at {start.loc}")
        return SIf(cond, then, otherwise, start.loc)

    def assign(self) -> SAssign:
        start = self.tok
        if start.kind is not Tok.NAME:
            raise self.error(f"expected a statement but found {start.describe()}")
        target, _ = self.atom()
        if not isinstance(target, (SName, SSubscript)):
            raise self.error("expected a buffer element to assign to, like C[i, j]", start)
        if self.tok.kind is not Tok.OP or self.tok.text not in ASSIGN_OPS:
            raise self.error(
                f"expected an assignment (= += -= *= /= max= min=) but found {self.tok.describe()}"
            )
        op = self.advance().text
        return SAssign(target, op, self.expr(), start.loc)

    # -- expressions

    def expr(self) -> SExpr:
        """A whole expression, its nesting checked (see the module docstring)."""
        return self.expr_height()[0]

    # Each method below returns the node with its height (a leaf is 1), so the nesting limit
    # is checked where a node is built, at the token that crosses it, in constant time.

    def expr_height(self) -> tuple[SExpr, int]:
        """``or`` binds loosest, then ``and``, ``not``, one comparison, the binary operators
        (``BINARY_LEVELS``), the unary signs ``- + ~``; where a condition may stand is for
        lowering to say (``select``'s first argument)."""
        node, height = self.conjunction()
        while self.at("or"):
            op = self.advance()
            rhs, rhs_height = self.conjunction()
            node, height = SLogic(op.text, node, rhs, op.loc), self.grown(max(height, rhs_height), op)
        return node, height

    def conjunction(self) -> tuple[SExpr, int]:
        node, height = self.negation()
        while self.at("and"):
            op = self.advance()
            rhs, rhs_height = self.negation()
            node, height = SLogic(op.text, node, rhs, op.loc), self.grown(max(height, rhs_height), op)
        return node, height

    def negation(self) -> tuple[SExpr, int]:
        if self.at("not"):
            with self.nested():
                op = self.advance()
                operand, height = self.negation()
            return SNot(operand, op.loc), self.grown(height, op)
        return self.comparison()

    def comparison(self) -> tuple[SExpr, int]:
        node, height = self.binary()
        if self.tok.kind is Tok.OP and self.tok.text in COMPARISONS:
            op = self.advance()
            rhs, rhs_height = self.binary()
            node, height = SCompare(op.text, node, rhs, op.loc), self.grown(max(height, rhs_height), op)
            if self.tok.kind is Tok.OP and self.tok.text in COMPARISONS:
                raise self.error(
                    f"comparisons do not chain: write 'a {op.text} b and b {self.tok.text} c', "
                    f"not 'a {op.text} b {self.tok.text} c'"
                )
        return node, height

    def binary(self) -> tuple[SExpr, int]:
        """Operands joined by the operators of ``BINARY_LEVELS``, each left-associative,
        grouped by an operator stack (shunting-yard) rather than a call per level, so the
        parser's recursion grows with the nesting only (``nested``), not with the levels."""
        operands = [self.unary()]
        pending: list[Token] = []
        while self.tok.kind is Tok.OP and self.tok.text in _LEVEL:
            op = self.advance()
            if op.text in ("&", "|") and self.at(op.text):  # C's && and ||
                raise self.error(f"'{op.text * 2}' is written '{'and' if op.text == '&' else 'or'}' here", op)
            while pending and _LEVEL[pending[-1].text] >= _LEVEL[op.text]:
                self.reduce(operands, pending.pop())
            pending.append(op)
            operands.append(self.unary())
        while pending:
            self.reduce(operands, pending.pop())
        return operands[0]

    def reduce(self, operands: list[tuple[SExpr, int]], op: Token) -> None:
        """The last two operands joined by ``op``."""
        (rhs, rhs_height), (lhs, lhs_height) = operands.pop(), operands.pop()
        operands.append((SBinary(op.text, lhs, rhs, op.loc), self.grown(max(lhs_height, rhs_height), op)))

    def unary(self) -> tuple[SExpr, int]:
        if self.at("-") or self.at("+") or self.at("~"):
            with self.nested():
                op = self.advance()
                operand, height = self.unary()
            if op.text == "+":
                return operand, height
            return (SNeg if op.text == "-" else SInvert)(operand, op.loc), self.grown(height, op)
        return self.atom()

    def atom(self) -> tuple[SExpr, int]:
        token = self.tok
        if token.kind in (Tok.INT, Tok.FLOAT):
            if token.kind is Tok.INT and len(token.text.lstrip("0")) > MAX_INT_DIGITS:
                raise self.error(
                    f"integer literal {_abbreviate(token.text)} is too large: it has "
                    f"{len(token.text.lstrip('0'))} digits (at most {MAX_INT_DIGITS})"
                )
            self.advance()
            return SNum(token.text, token.kind is Tok.INT, token.loc), 1
        if token.kind is Tok.NAME:
            if token.text in KEYWORDS:
                raise self.error(f"'{token.text}' is a keyword and cannot start an expression")
            self.advance()
            if self.at("[") or self.at("("):
                bracket = self.tok.text
                args, height = self.arguments_height(bracket, "]" if bracket == "[" else ")")
                node = (SSubscript if bracket == "[" else SCall)(token.text, args, token.loc)
                return node, self.grown(height, token)
            return SName(token.text, token.loc), 1
        if self.at("("):
            with self.nested():
                self.advance()
                inner = self.expr_height()
                self.expect(")")
            return inner
        raise self.error(f"expected an expression but found {token.describe()}")

    def arguments(self, open_: str, close: str) -> tuple[SExpr, ...]:
        return self.arguments_height(open_, close)[0]

    def arguments_height(self, open_: str, close: str) -> tuple[tuple[SExpr, ...], int]:
        """The arguments and the height of the tallest (0 for none)."""
        with self.nested():
            self.expect(open_)
            args: list[SExpr] = []
            height = 0
            if not self.at(close):
                while True:
                    arg, arg_height = self.expr_height()
                    args.append(arg)
                    height = max(height, arg_height)
                    if not self.at(","):
                        break
                    self.advance()
            self.expect(close)
        return tuple(args), height

    def grown(self, child_height: int, token: Token) -> int:
        """The height of a node over a child of ``child_height``, checked against the limit."""
        if child_height + 1 > MAX_EXPR_NESTING:
            raise self.error(_too_deep_message(), token)
        return child_height + 1

    @contextmanager
    def nested(self) -> Iterator[None]:
        """Entered for each parenthesis, bracket, call or unary sign: the parser recurses
        there, so the limit is checked before the recursion can grow."""
        if self.nesting >= MAX_EXPR_NESTING:
            raise self.error(_too_deep_message())
        self.nesting += 1
        try:
            yield
        finally:
            self.nesting -= 1


def _too_deep_message() -> str:
    return (
        f"expression nested too deeply: more than {MAX_EXPR_NESTING} levels of operators, signs, "
        f"parentheses, brackets or calls (polymap's limit; split it with a temporary buffer)"
    )


def _abbreviate(digits: str) -> str:
    return digits if len(digits) <= 24 else f"{digits[:10]}...{digits[-10:]}"
