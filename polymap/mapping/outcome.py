"""What became of a kernel's mapping decision: a typed outcome next to SCIP's own status.

Imports nothing from the solver (no SCIP, no sympy), so that a mapping and its report can
be read, printed and compared without loading them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.Enum):
    """How a kernel's mapping was decided. SCIP's raw status string stays in
    ``SolveReport.status``; code branches on this, never on a status prefix."""

    OPTIMAL = "optimal"
    """SCIP proved the mapping optimal (gap 0 within its tolerances)."""
    TIME_LIMIT = "time limit"
    """SCIP stopped at the time limit with a feasible mapping: the best found, not proved optimal."""
    INFEASIBLE = "infeasible"
    """SCIP proved that no mapping satisfies the limits and pins."""
    STOPPED = "stopped"
    """SCIP stopped for another reason (a limit other than time, an interrupt, unboundedness)."""
    NO_DECISIONS = "no decisions"
    """Nothing to decide: a serial kernel runs as one block of one thread; SCIP did not run."""
    GIVEN = "given"
    """The mapping was given by the caller, not solved: its costs are recomputed, not optimized."""

    @classmethod
    def from_scip(cls, status: str, n_solutions: int) -> Outcome:
        """The outcome of SCIP's status word (``Model.getStatus()``)."""
        if status == "optimal":
            return cls.OPTIMAL
        if status == "infeasible":
            return cls.INFEASIBLE
        if status == "timelimit" and n_solutions > 0:
            return cls.TIME_LIMIT
        return cls.STOPPED

    @property
    def solved(self) -> bool:
        """Whether SCIP chose the mapping (optimal or the best found at the time limit)."""
        return self in (Outcome.OPTIMAL, Outcome.TIME_LIMIT)


@dataclass(frozen=True, slots=True)
class SolveReport:
    """What SCIP said, unembellished (minimization).

    ``status`` is SCIP's word ("optimal", "infeasible", "unbounded", "inforunbd",
    "timelimit", ...), or ``""`` when SCIP did not run (``outcome`` says why).
    ``objective`` is the best primal value found, ``None`` without a solution; ``dual_bound``
    is SCIP's proven lower bound on the optimum (``inf`` when proved infeasible, ``-inf``
    when nothing is known); ``gap`` is SCIP's relative gap, ``None`` without a solution and
    ``inf`` while SCIP has a solution but no finite dual bound yet.
    ``outcome`` is derived from the status unless given."""

    status: str
    solve_time_s: float
    objective: float | None
    dual_bound: float
    gap: float | None
    n_solutions: int
    outcome: Outcome | None = None

    def __post_init__(self) -> None:
        if self.outcome is None:
            object.__setattr__(self, "outcome", Outcome.from_scip(self.status, self.n_solutions))

    @property
    def optimal(self) -> bool:
        return self.outcome is Outcome.OPTIMAL

    @classmethod
    def no_decisions(cls) -> SolveReport:
        """The report of a kernel with nothing to decide (SCIP not run)."""
        return cls("", 0.0, None, -float("inf"), None, 0, Outcome.NO_DECISIONS)
