"""polymap: a polyhedral GPU thread-mapping optimizer for small tensor programs.

The public API, re-exported; nothing else lives here.
"""

from polymap import plan  # the package, callable as its planner (polymap.plan.planner.plan)
from polymap.errors import (
    AccessError,
    ArgumentError,
    ArityError,
    BoundsError,
    CodegenError,
    CudaCompileError,
    DeclarationError,
    InfeasibleMappingError,
    InternalError,
    MappingError,
    NotAffineError,
    ParseError,
    PolymapError,
    ProgramError,
    RaceError,
    RangeError,
    ShapeError,
    SolverError,
    SourceLoc,
    UndeclaredError,
    UninitializedReadError,
    VerificationError,
)
from polymap.fused import compile, optimize
from polymap.ir.nodes import Program
from polymap.ir.parse import load, parse
from polymap.kernel import Kernel
from polymap.mapping.result import Mapping
from polymap.mapping.space import Axis, Distribution, LoopPin
from polymap.plan.frontier import frontier
from polymap.poly.model import analyze
from polymap.prove import verify
from polymap.reference import reference
from polymap.targets import A100, H100, H200, L40S, GpuTarget
from polymap.version import __version__

__all__ = [
    "H100",
    "H200",
    "A100",
    "L40S",
    "AccessError",
    "ArgumentError",
    "ArityError",
    "Axis",
    "BoundsError",
    "CodegenError",
    "CudaCompileError",
    "DeclarationError",
    "Distribution",
    "GpuTarget",
    "InfeasibleMappingError",
    "InternalError",
    "Kernel",
    "LoopPin",
    "Mapping",
    "MappingError",
    "NotAffineError",
    "ParseError",
    "PolymapError",
    "Program",
    "ProgramError",
    "RaceError",
    "RangeError",
    "ShapeError",
    "SolverError",
    "SourceLoc",
    "UndeclaredError",
    "UninitializedReadError",
    "VerificationError",
    "__version__",
    "analyze",
    "compile",
    "load",
    "optimize",
    "parse",
    "frontier",
    "plan",
    "reference",
    "verify",
]
