"""Progress lines for the steps that take a while: off unless a caller turns them on.

The command line turns them on (``polymap map``, ``run``, ...; ``--quiet`` keeps them off)
and writes them to stderr; the Python API stays silent unless wrapped in :func:`reporting`.
A step that ends within ``after_s`` prints nothing; one that runs longer prints a line when
it ends, and SCIP, while it solves, prints its incumbent and bound at most once per
``every_s``, so a 30 s solve is not 30 s of silence.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Reporter:
    """Where the lines go and how patient they are."""

    stream: TextIO
    after_s: float = 1.0  # a step shorter than this prints nothing
    every_s: float = 2.0  # SCIP's lines at most this often
    started: float = field(default_factory=time.perf_counter)

    def line(self, text: str) -> None:
        print(f"polymap: {text}", file=self.stream, flush=True)


_current: ContextVar[Reporter | None] = ContextVar("polymap_progress", default=None)


@contextlib.contextmanager
def reporting(
    stream: TextIO | None = None, *, after_s: float = 1.0, every_s: float = 2.0
) -> Iterator[Reporter]:
    """Progress lines on ``stream`` (default stderr) for the steps run inside the block."""
    reporter = Reporter(stream or sys.stderr, after_s, every_s)
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Time a step; with a reporter, say how long it took when that is over ``after_s``."""
    reporter = _current.get()
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    if reporter is not None and elapsed >= reporter.after_s:
        reporter.line(f"{name}: {elapsed:.1f} s")


def watch_solve(model, label: str, *, unit: str = "us", scale: float = 1.0, what: str = "mapping") -> None:
    """With a reporter, have SCIP report its progress on ``model`` while it solves (an event
    handler on new incumbents and solved nodes, throttled); without one, nothing is added.
    The objective is printed times ``scale``, in ``unit``; ``what`` names a solution."""
    reporter = _current.get()
    if reporter is None:
        return
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    class SolveProgress(Eventhdlr):
        last = -math.inf

        def eventinit(self):
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexit(self):
            self.model.dropEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.dropEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event):
            solving = self.model.getSolvingTime()
            if solving < reporter.after_s or solving - self.last < reporter.every_s:
                return
            self.last = solving
            reporter.line(f"{label}: SCIP at {solving:.0f} s, {_incumbent(self.model, unit, scale, what)}")

    model.includeEventhdlr(SolveProgress(), "polymap_progress", "progress lines while SCIP solves")


def _incumbent(model, unit: str, scale: float, what: str) -> str:
    """SCIP's best solution so far and its bound, in the report's words."""
    nodes = f"{model.getNNodes()} nodes"
    best, bound, inf = model.getPrimalbound(), model.getDualbound(), model.infinity()
    if abs(best) >= inf:
        return f"no {what} yet, {nodes}"
    bound_text = f"{bound * scale:.6g} {unit}" if abs(bound) < inf else "none yet"
    return f"best {best * scale:.6g} {unit}, bound {bound_text}, {nodes}"
