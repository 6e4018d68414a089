"""Tokens of the TE language, each with its 1-based line:col.

Newlines end statements, except inside ``(...)`` and ``[...]`` where an expression may
continue on the next line. ``max=`` and ``min=`` (no space before ``=``) are single
assignment tokens, so ``max(a, b)`` stays a call.
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple

from polymap.errors import ParseError, SourceLoc


class Tok(enum.Enum):
    NAME = "name"
    INT = "integer"
    FLOAT = "number"
    OP = "operator"
    NEWLINE = "end of line"
    EOF = "end of input"


class Token(NamedTuple):
    # A named tuple rather than a frozen dataclass: a program has a token every few
    # characters, and a tuple is several times cheaper to build (large inputs stay fast).
    kind: Tok
    text: str
    loc: SourceLoc

    def describe(self) -> str:
        if self.kind in (Tok.NEWLINE, Tok.EOF):
            return self.kind.value
        return f"'{self.text}'"


_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r]+)
  | (?P<comment>\#[^\n]*)
  | (?P<newline>\n)
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<assign>(?:max|min)=(?!=))
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>//|<<|>>|\+=|-=|\*=|/=|==|!=|<=|>=|[-+*/%=<>&|^~\[\](){},:;])
    """,
    re.VERBOSE,
)

_OPENERS = {"(": ")", "[": "]"}


_KINDS = {"float": Tok.FLOAT, "int": Tok.INT, "name": Tok.NAME, "assign": Tok.OP, "op": Tok.OP}


def tokenize(text: str, *, source: str | None = None) -> list[Token]:
    """Split TE text into tokens; raises ParseError at the first character that fits none."""
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    depth: list[Token] = []  # open parentheses and brackets, innermost last
    for match in _TOKEN.finditer(text):
        start = match.start()
        if start != pos:  # finditer skipped a character that no token fits
            break
        pos = match.end()
        kind = match.lastgroup
        if kind == "space" or kind == "comment":
            continue
        if kind == "newline":
            if not depth:
                tokens.append(Token(Tok.NEWLINE, "\n", SourceLoc(line, start - line_start + 1)))
            line, line_start = line + 1, pos
            continue
        lexeme = match.group()
        token = Token(_KINDS[kind], lexeme, SourceLoc(line, start - line_start + 1))
        if lexeme in _OPENERS:
            depth.append(token)
        elif lexeme == ")" or lexeme == "]":
            if not depth or _OPENERS[depth[-1].text] != lexeme:
                raise ParseError(f"unmatched '{lexeme}'", loc=token.loc, source=source, text=text)
            depth.pop()
        elif (lexeme == "{" or lexeme == "}") and depth:
            opener = depth[-1]
            raise ParseError(
                f"'{opener.text}' opened at {opener.loc} is not closed before '{lexeme}'",
                loc=token.loc,
                source=source,
                text=text,
            )
        tokens.append(token)
    if pos < len(text):
        loc = SourceLoc(line, pos - line_start + 1)
        raise ParseError(f"unexpected character {text[pos]!r}", loc=loc, source=source, text=text)
    if depth:
        opener = depth[-1]
        raise ParseError(f"'{opener.text}' is never closed", loc=opener.loc, source=source, text=text)
    tokens.append(Token(Tok.EOF, "", SourceLoc(line, pos - line_start + 1)))
    return tokens
