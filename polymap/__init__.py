"""polymap: a polyhedral GPU thread-mapping optimizer for small tensor programs.

The public API, re-exported; nothing else lives here.
"""

from polymap.errors import (
    AccessError,
    ArgumentError,
    ArityError,
    BoundsError,
    DeclarationError,
    InternalError,
    NotAffineError,
    ParseError,
    PolymapError,
    ProgramError,
    RaceError,
    ShapeError,
    SourceLoc,
    UndeclaredError,
)
from polymap.ir.nodes import Program
from polymap.ir.parse import load, parse
from polymap.poly.model import analyze
from polymap.reference import reference

__all__ = [
    "AccessError",
    "ArgumentError",
    "ArityError",
    "BoundsError",
    "DeclarationError",
    "InternalError",
    "NotAffineError",
    "ParseError",
    "PolymapError",
    "Program",
    "ProgramError",
    "RaceError",
    "ShapeError",
    "SourceLoc",
    "UndeclaredError",
    "analyze",
    "load",
    "parse",
    "reference",
]
