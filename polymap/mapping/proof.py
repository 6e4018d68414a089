"""What ``verify`` proved, as typed values: per kernel and per obligation, about which
statement, buffer or dependence, on which relation, for which sizes (``verify.py`` says how
each is proved). A ``Mapping`` carries the report of its own decisions (``Mapping.proof``);
the code generator accepts a mapping only with a report that proves that very mapping
(:meth:`VerificationReport.proves`) and prints its header's proof lines from it.

Only types live here (no isl): the result of ``optimize`` imports them without the prover.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from polymap.ir.nodes import Program
from polymap.mapping.space import KernelMapping


class Obligation(enum.Enum):
    """One kind of fact ``verify`` proves (the obligations of ``verify.py``)."""

    IN_BOUNDS = "in bounds"  # every executed access inside its buffer's shape
    RACE_FREE = "race free"  # no two threads of a launch touch an element, one writing
    EXACTLY_ONCE = "exactly once"  # the executed instances are the domain, each run once
    DEPENDENCE_KEPT = "dependences kept"  # inside a launch: one thread, source first
    STAGING_COVERAGE = "staging coverage"  # a staged read finds its element copied, before it
    BARRIERS = "barriers"  # a barrier between a copy and other threads' accesses to its tile
    VECTOR_COPIES = "vector copies"  # a copy's vector: aligned, its lanes neighbours in the tile
    LANE_ORDER = "lane order"  # across the lanes of a warp: source first, a fork or join between
    LAUNCH_ORDER = "launch order"  # across launches: the source's launch first


@dataclass(frozen=True, slots=True)
class Proved:
    """One obligation proved: ``subject`` is the statement, buffer or dependence it is
    about; ``relation`` names the isl relation (in ``verify.py``'s notation, ``R_S`` the
    hardware relation of statement S) whose emptiness or equality was proved; ``text`` is
    the line printed for it."""

    obligation: Obligation
    subject: str
    relation: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class KernelProof:
    """The obligations proved for one kernel; ``launch`` describes the grid, block and
    per-loop decisions the hardware relation was built from."""

    kernel: str
    launch: str
    proved: tuple[Proved, ...]

    @property
    def obligations(self) -> tuple[str, ...]:
        """One readable line each, led by the launch."""
        return (f"{self.kernel}: {self.launch}",) + tuple(p.text for p in self.proved)

    def of(self, obligation: Obligation) -> tuple[Proved, ...]:
        return tuple(p for p in self.proved if p.obligation is obligation)

    def summary(self) -> str:
        """The obligations in one line: each kind with its subjects (dependences counted)."""
        kinds = []
        for obligation in Obligation:
            subjects = list(dict.fromkeys(p.subject for p in self.of(obligation)))
            if obligation in (Obligation.DEPENDENCE_KEPT, Obligation.LAUNCH_ORDER) and subjects:
                kinds.append(f"{obligation.value} ({len(subjects)})")
            elif subjects:
                kinds.append(f"{obligation.value} ({', '.join(subjects)})")
        return "; ".join(kinds) or "nothing to prove (no statement)"


@dataclass(frozen=True, slots=True)
class VerificationReport:
    """What ``verify`` proved for ``mappings`` (one KernelMapping per kernel, in launch
    order) of ``program``, for every size of ``context``: per kernel its obligations, then
    the launch-order proofs of dependences between launches. ``parametric`` says the grid
    was taken as a function of the symbolic sizes (see ``verify.py``) rather than the
    mapping's ``blocks``."""

    program: Program
    mappings: tuple[KernelMapping, ...]
    kernels: tuple[KernelProof, ...]
    launch_order: tuple[Proved, ...]
    parametric: bool
    context: str | None = None

    def proves(self, program: Program, mappings: tuple[KernelMapping, ...], context: str | None) -> bool:
        """Whether this report is the proof of exactly these decisions on this program for
        this context, with one KernelProof per kernel (frozen values compared by value)."""
        names = tuple(m.kernel.name for m in mappings)
        return (
            self.program == program
            and self.mappings == tuple(mappings)
            and self.context == context
            and tuple(k.kernel for k in self.kernels) == names
        )

    def kernel(self, name: str) -> KernelProof:
        for k in self.kernels:
            if k.kernel == name:
                return k
        raise KeyError(name)

    @property
    def sizes(self) -> str:
        """The sizes the proof holds for, in words."""
        if not self.program.params:
            return "the bound sizes"
        return self.program.sizes_in_words(self.context)

    def lines(self) -> tuple[str, ...]:
        between = tuple(p.text for p in self.launch_order)
        return tuple(line for k in self.kernels for line in k.obligations) + between

    def __str__(self) -> str:
        return "\n".join(self.lines())


__all__ = ["KernelProof", "Obligation", "Proved", "VerificationReport"]
