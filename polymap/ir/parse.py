"""Parsing TE text: ``parse(text) -> Program`` and ``load(path) -> Program``.

Grammar (statements end at a newline or ``;``; newlines inside ``()``/``[]`` are ignored)::

    program  := item*
    item     := 'param' pdecl (',' pdecl)*  |  decl  |  stmt
    pdecl    := NAME ('=' expr)?
    decl     := ('in' | 'out' | 'inout' | 'new') NAME ':' DTYPE ('[' (expr (',' expr)*)? ']')?
    stmt     := ('par' | 'seq') expr NAME '{' (stmt | decl)* '}'
              | target ASSIGN expr          ASSIGN := = += -= *= max= min=
              | 'anchor' expr
    target   := NAME ('[' (expr (',' expr)*)? ']')?
    expr     := term (('+' | '-') term)*
    term     := unary (('*' | '/' | '//' | '%') unary)*
    unary    := '-' unary | atom
    atom     := NUMBER | NAME | NAME '[' args ']' | NAME '(' args ')' | '(' expr ')'

Index and value expressions share one syntax here; lowering tells them apart.
"""

from __future__ import annotations

from pathlib import Path

from polymap.errors import ArgumentError, ParseError, PolymapError
from polymap.ir.lexer import Tok, Token, tokenize
from polymap.ir.nodes import Program
from polymap.ir.syntax import (
    SAnchor,
    SAssign,
    SBinary,
    SCall,
    SDecl,
    SExpr,
    SLoop,
    SName,
    SNeg,
    SNum,
    SParam,
    SStmt,
    SSubscript,
)

ASSIGN_OPS = ("=", "+=", "-=", "*=", "max=", "min=")
DECL_KINDS = ("in", "out", "inout", "new")
KEYWORDS = frozenset(("param", "par", "seq", "anchor", *DECL_KINDS))


def parse(text: str, *, name: str | None = None, source: str | None = None) -> Program:
    """Parse TE text into a checked :class:`Program`.

    ``name`` names the program (default: the file stem of ``source``, else ``program``);
    ``source`` is the file name used in error messages. Raises a ParseError for syntax
    errors and a ProgramError subclass for invalid programs, both with line:col."""
    from polymap.ir.lower import lower

    if not isinstance(text, str):
        raise ArgumentError(f"parse() takes the program text as a str, got {type(text).__name__}")
    source = source or "<string>"
    items = _Parser(tokenize(text, source=source), source, text).program()
    program_name = name or (Path(source).stem if source != "<string>" else "program")
    return lower(items, name=program_name, source=source, text=text)


def load(path: str | Path) -> Program:
    """Read and parse a ``.te`` file; errors name the file with line:col."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ArgumentError(f"cannot read program file {str(path)!r}: {err}") from None
    return parse(text, name=path.stem, source=str(path))


class _Parser:
    def __init__(self, tokens: list[Token], source: str, text: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.source = source
        self.text = text

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
        raise self.error(f"expected the end of the statement (a newline or ';') but found {self.tok.describe()}")

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
                raise self.error(f"'{word}' buffers are declared at top level; only 'new' may appear in a block")
            return [self.decl()]
        if word in ("par", "seq"):
            return [self.loop()]
        if word == "anchor":
            loc = self.advance().loc
            return [SAnchor(self.expr(), loc)]
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
        dtype = self.expect_name("a dtype (f32, f64 or i32)")
        shape: tuple[SExpr, ...] = ()
        if self.at("["):
            shape = self.arguments("[", "]")
        return SDecl(kind.text, name.text, dtype.text, dtype.loc, shape, kind.loc)

    def loop(self) -> SLoop:
        kind = self.advance()
        if self.tok.kind is Tok.NAME and self.peek().text == "{":
            raise self.error(
                f"'{kind.text}' needs an extent and an index, e.g. '{kind.text} N {self.tok.text} {{'; "
                f"found only '{self.tok.text}'"
            )
        extent = self.expr()
        if self.at("{"):
            raise self.error(f"'{kind.text}' needs an extent and an index, e.g. '{kind.text} N i {{'; "
                             f"found no index name before '{{'")
        index = self.expect_name("a loop index name after the extent")
        self.expect("{", f" to open the body of {kind.text} loop '{index.text}'")
        body = self.block(top_level=False)
        self.expect("}", f" to close {kind.text} loop '{index.text}' opened at {kind.loc}")
        return SLoop(kind.text, extent, index.text, index.loc, body, kind.loc)

    def assign(self) -> SAssign:
        start = self.tok
        if start.kind is not Tok.NAME:
            raise self.error(f"expected a statement but found {start.describe()}")
        target = self.atom()
        if not isinstance(target, (SName, SSubscript)):
            raise self.error("expected a buffer element to assign to, like C[i, j]", start)
        if self.tok.kind is not Tok.OP or self.tok.text not in ASSIGN_OPS:
            raise self.error(f"expected an assignment (= += -= *= max= min=) but found {self.tok.describe()}")
        op = self.advance().text
        return SAssign(target, op, self.expr(), start.loc)

    # -- expressions

    def expr(self) -> SExpr:
        node = self.term()
        while self.tok.kind is Tok.OP and self.tok.text in ("+", "-"):
            op = self.advance()
            node = SBinary(op.text, node, self.term(), op.loc)
        return node

    def term(self) -> SExpr:
        node = self.unary()
        while self.tok.kind is Tok.OP and self.tok.text in ("*", "/", "//", "%"):
            op = self.advance()
            node = SBinary(op.text, node, self.unary(), op.loc)
        return node

    def unary(self) -> SExpr:
        if self.at("-"):
            op = self.advance()
            return SNeg(self.unary(), op.loc)
        if self.at("+"):
            self.advance()
            return self.unary()
        return self.atom()

    def atom(self) -> SExpr:
        token = self.tok
        if token.kind in (Tok.INT, Tok.FLOAT):
            self.advance()
            return SNum(token.text, token.kind is Tok.INT, token.loc)
        if token.kind is Tok.NAME:
            if token.text in KEYWORDS:
                raise self.error(f"'{token.text}' is a keyword and cannot start an expression")
            self.advance()
            if self.at("["):
                return SSubscript(token.text, self.arguments("[", "]"), token.loc)
            if self.at("("):
                return SCall(token.text, self.arguments("(", ")"), token.loc)
            return SName(token.text, token.loc)
        if self.at("("):
            self.advance()
            inner = self.expr()
            self.expect(")")
            return inner
        raise self.error(f"expected an expression but found {token.describe()}")

    def arguments(self, open_: str, close: str) -> tuple[SExpr, ...]:
        self.expect(open_)
        args: list[SExpr] = []
        if not self.at(close):
            args.append(self.expr())
            while self.at(","):
                self.advance()
                args.append(self.expr())
        self.expect(close)
        return tuple(args)
