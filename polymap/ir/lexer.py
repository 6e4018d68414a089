"""Tokens of the TE language, each with its 1-based line:col.

Newlines end statements, except inside ``(...)`` and ``[...]`` where an expression may
continue on the next line. ``max=`` and ``min=`` (no space before ``=``) are single
assignment tokens, so ``max(a, b)`` stays a call.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from polymap.errors import ParseError, SourceLoc


class Tok(enum.Enum):
    NAME = "name"
    INT = "integer"
    FLOAT = "number"
    OP = "operator"
    NEWLINE = "end of line"
    EOF = "end of input"


@dataclass(frozen=True, slots=True)
class Token:
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
  | (?P<op>//|\+=|-=|\*=|[-+*/%=\[\](){},:;])
    """,
    re.VERBOSE,
)

_OPENERS = {"(": ")", "[": "]"}


def tokenize(text: str, *, source: str | None = None) -> list[Token]:
    """Split TE text into tokens; raises ParseError at the first character that fits none."""
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    depth: list[Token] = []  # open parentheses and brackets, innermost last
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        loc = SourceLoc(line, pos - line_start + 1)
        if match is None:
            raise ParseError(f"unexpected character {text[pos]!r}", loc=loc, source=source, text=text)
        kind, lexeme = match.lastgroup, match.group()
        pos = match.end()
        if kind == "newline":
            if not depth:
                tokens.append(Token(Tok.NEWLINE, "\n", loc))
            line, line_start = line + 1, pos
            continue
        if kind in ("space", "comment"):
            continue
        tok_kind = {"float": Tok.FLOAT, "int": Tok.INT, "name": Tok.NAME}.get(kind, Tok.OP)
        token = Token(tok_kind, lexeme, loc)
        if lexeme in _OPENERS:
            depth.append(token)
        elif lexeme in (")", "]"):
            if not depth or _OPENERS[depth[-1].text] != lexeme:
                raise ParseError(f"unmatched '{lexeme}'", loc=loc, source=source, text=text)
            depth.pop()
        elif lexeme in ("{", "}") and depth:
            opener = depth[-1]
            raise ParseError(
                f"'{opener.text}' opened at {opener.loc} is not closed before '{lexeme}'",
                loc=loc,
                source=source,
                text=text,
            )
        tokens.append(token)
    if depth:
        opener = depth[-1]
        raise ParseError(f"'{opener.text}' is never closed", loc=opener.loc, source=source, text=text)
    tokens.append(Token(Tok.EOF, "", SourceLoc(line, pos - line_start + 1)))
    return tokens
