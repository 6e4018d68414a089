"""The one error family of polymap.

Every failure a user can cause reaches them as a :class:`PolymapError` subclass whose
message names the culprit (statement, loop or buffer) and, for text input, the
``file:line:col`` with the offending source line and a caret under the column.
Raw isl, SCIP, NVRTC or Python errors are wrapped before they reach the user.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A 1-based position in a program's text."""

    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"


class PolymapError(Exception):
    """Root of every error polymap raises on purpose.

    ``message`` says what is wrong; ``loc`` and ``source`` (a file name or ``<string>``)
    place it in the program text, and ``text`` (the whole program text, when known) lets
    the error quote the offending line with a caret under the column.
    """

    def __init__(
        self,
        message: str,
        *,
        loc: SourceLoc | None = None,
        source: str | None = None,
        text: str | None = None,
    ) -> None:
        self.message = message
        self.loc = loc
        self.source = source
        self.text = text
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            prefix = f"{self.source}: " if self.source else ""
            return prefix + self.message
        where = f"{self.source or '<string>'}:{self.loc}"
        rendered = f"{where}: {self.message}"
        line = _source_line(self.text, self.loc.line)
        if line is not None:
            caret = " " * (self.loc.col - 1) + "^"
            rendered += f"\n    {line}\n    {caret}"
        return rendered

    def located(self, *, source: str | None, text: str | None) -> PolymapError:
        """The same error with the program's file name and text filled in where missing."""
        if (self.source or not source) and (self.text or not text):
            return self
        clone = self.__class__.__new__(self.__class__)
        clone.__dict__.update(self.__dict__)
        PolymapError.__init__(
            clone,
            self.message,
            loc=self.loc,
            source=self.source or source,
            text=self.text or text,
        )
        return clone


def _source_line(text: str | None, line: int) -> str | None:
    if text is None:
        return None
    lines = text.splitlines()
    if 1 <= line <= len(lines):
        return lines[line - 1].rstrip()
    return None


class ParseError(PolymapError):
    """The text is not a program of the TE language (syntax)."""


class ProgramError(PolymapError):
    """The program parses but is not valid: the subclasses say why."""


class UndeclaredError(ProgramError):
    """A buffer, size parameter or loop index is used without being declared."""


class DeclarationError(ProgramError):
    """A declaration is wrong: a name declared twice, an unknown dtype, a bad default."""


class ArityError(ProgramError):
    """A buffer is indexed with a different number of indices than it has dimensions."""


class ShapeError(ProgramError):
    """Extents disagree, e.g. an einsum index that ranges over K in one buffer and N in another."""


class NotAffineError(ProgramError):
    """An index or extent is not quasi-affine (e.g. ``x[i * i]``, or ``i * N`` with N symbolic).

    ``params`` names the size parameters whose symbolic value made the expression
    non-affine: binding them to numbers (``Program.bind``) makes it affine.
    """

    def __init__(self, message: str, *, params: tuple[str, ...] = (), **kwargs) -> None:
        self.params = params
        super().__init__(message, **kwargs)


class RangeError(ProgramError):
    """A constant does not fit the type that holds it: an integer literal outside i32 in a
    statement that computes in i32, or an index constant (written, or folded from literals
    and bound sizes) outside the 64-bit range of the emitted index arithmetic."""


class AccessError(ProgramError):
    """A buffer is used against its kind, e.g. a write to an ``in`` buffer."""


class RaceError(ProgramError):
    """Two iterations of a par loop touch one element and at least one of them writes."""


class BoundsError(ProgramError):
    """An access can leave its buffer's declared shape."""


class UninitializedReadError(ProgramError):
    """A read of a temporary (``new``) element that nothing before it writes."""


class ArgumentError(PolymapError):
    """An API call got bad arguments: missing or misshapen arrays, unknown sizes, bad values."""


class InternalError(PolymapError):
    """A bug in polymap: an invariant that should hold did not. Please report it."""


class MappingError(PolymapError):
    """The mapping model cannot be built as asked, e.g. a cost constraint that is not
    affine in the iteration variables, or a linearization above degree 2 in the decisions."""


class SolverError(MappingError):
    """SCIP failed (raised, or rejected the model); the message carries SCIP's own words."""


class InfeasibleMappingError(MappingError):
    """No mapping satisfies the pins (and the target's limits); the message names the
    conflicting pins."""


class VerificationError(MappingError):
    """A concrete mapping failed its isl proof: an instance run twice or never, an access out
    of bounds, a race between threads, or a dependence the launch or thread order breaks.
    The message names the kernel, loop, statement and access, with a witness point."""


class CodegenError(PolymapError):
    """A program or mapping that code generation cannot express (e.g. a block-local buffer
    whose shape is not a constant, so it cannot live in registers)."""


class CudaCompileError(PolymapError):
    """The emitted CUDA C did not compile (NVRTC or the host C++ compiler). ``log`` is the
    compiler's own log; ``line`` the emitted source line it points at, when it names one."""

    def __init__(self, message: str, *, log: str = "", line: str | None = None, **kwargs) -> None:
        self.log = log
        self.line = line
        super().__init__(message, **kwargs)


class MachineCodeError(PolymapError):
    """The machine code of a kernel could not be read: the disassembler (``cuobjdump``) is
    missing, failed or timed out, or printed something polymap does not understand."""


class PlanError(PolymapError):
    """The fusion planner cannot plan this program or capacity: the program is not a chain
    of einsums (the message names the statement and why), or the capacity is too small for
    any plan (the message names the einsum that does not fit)."""


class CapacityError(PlanError):
    """No plan fits the capacity: the message names the einsum that cannot fit, or the pins
    that make every plan too large."""
