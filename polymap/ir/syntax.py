"""The concrete syntax tree of a TE program, before names are resolved.

The parser only knows shapes of text: ``X[...]`` could be a read of a buffer or a typo,
``k`` could be a loop index, a size, a scalar buffer or an einsum index. Lowering
(:mod:`polymap.ir.lower`) decides, with the scopes at hand, and reports what is wrong at
the exact line:col kept here.
"""

from __future__ import annotations

from dataclasses import dataclass

from polymap.errors import SourceLoc


@dataclass(frozen=True, slots=True)
class SNum:
    text: str
    is_int: bool
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SName:
    name: str
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SSubscript:
    """``name[e, ...]`` (``name[]`` for a 0-d buffer)."""

    name: str
    args: tuple[SExpr, ...]
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SCall:
    fn: str
    args: tuple[SExpr, ...]
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SBinary:
    op: str  # + - * / // % & | ^ << >>
    lhs: SExpr
    rhs: SExpr
    loc: SourceLoc  # the operator


@dataclass(frozen=True, slots=True)
class SNeg:
    operand: SExpr
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SInvert:
    """``~operand``: the bitwise complement of an integer."""

    operand: SExpr
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SCompare:
    op: str  # < <= > >= == !=
    lhs: SExpr
    rhs: SExpr
    loc: SourceLoc  # the operator


@dataclass(frozen=True, slots=True)
class SLogic:
    op: str  # and or
    lhs: SExpr
    rhs: SExpr
    loc: SourceLoc  # the operator


@dataclass(frozen=True, slots=True)
class SNot:
    operand: SExpr
    loc: SourceLoc


SExpr = SNum | SName | SSubscript | SCall | SBinary | SNeg | SInvert | SCompare | SLogic | SNot
SCondition = SCompare | SLogic | SNot


@dataclass(frozen=True, slots=True)
class SParam:
    name: str
    default: SExpr | None
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SDecl:
    kind: str  # in out inout new
    name: str
    dtype: str
    dtype_loc: SourceLoc
    shape: tuple[SExpr, ...]
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SLoop:
    kind: str  # par seq
    extent: SExpr
    index: str
    index_loc: SourceLoc
    body: tuple[SStmt, ...]
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SAssign:
    target: SSubscript | SName
    op: str
    value: SExpr
    loc: SourceLoc
    atomic: bool = False  # ``atomic O[i] += x``


@dataclass(frozen=True, slots=True)
class SAnchor:
    value: SExpr
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SAssume:
    """``assume cond`` at top level: the sizes the program is valid for."""

    cond: SExpr
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class SIf:
    """``if cond { then } else { otherwise }`` (``else`` optional; ``else if`` nests)."""

    cond: SExpr
    then: tuple[SStmt, ...]
    otherwise: tuple[SStmt, ...]
    loc: SourceLoc


SStmt = SParam | SDecl | SLoop | SAssign | SAnchor | SAssume | SIf
