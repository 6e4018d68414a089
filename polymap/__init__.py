"""polymap: a polyhedral GPU thread-mapping optimizer for small tensor programs.

The public API, re-exported; nothing else lives here.
"""

from polymap.errors import (
    AccessError,
    ArgumentError,
    ArityError,
    BoundsError,
    DeclarationError,
    InfeasibleMappingError,
    InternalError,
    MappingError,
    NotAffineError,
    ParseError,
    PolymapError,
    ProgramError,
    RaceError,
    ShapeError,
    SolverError,
    SourceLoc,
    UndeclaredError,
    VerificationError,
)
from polymap.ir.nodes import Program
from polymap.ir.parse import load, parse
from polymap.mapping.result import Mapping
from polymap.mapping.solve import optimize
from polymap.mapping.space import Axis, Distribution, LoopPin
from polymap.mapping.verify import verify
from polymap.poly.model import analyze
from polymap.reference import reference
from polymap.targets import H100, H200, GpuTarget

__all__ = [
    "Axis",
    "Distribution",
    "GpuTarget",
    "H100",
    "H200",
    "InfeasibleMappingError",
    "LoopPin",
    "Mapping",
    "MappingError",
    "SolverError",
    "VerificationError",
    "optimize",
    "verify",
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
