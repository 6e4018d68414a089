"""Which select scans to rewrite as exact passes (``transform.scans``): a choice made on
SCIP's costs, the way ``split_choice.choose_splits`` chooses a reduction's parts. The
program is mapped as written and with the scan rewritten, and the cheaper kept; the
rewrite's passes run on the lanes where SCIP finds that cheaper (an argmax over rows of
1024: one thread per row fills 1.5% of an H100), while a short scan stays in its thread.
"""

from __future__ import annotations

from polymap.errors import ArgumentError, MappingError, ProgramError, SolverError
from polymap.ir.nodes import Program
from polymap.mapping.result import ScanChoice
from polymap.progress import step
from polymap.split_choice import GAIN_WANTED, first_line
from polymap.transform.scans import SelectScan, candidates, rewrite_scan, select_scans


def choose_scans(program: Program, objective, pins: dict[str, bool], *, analyses, context):
    """``program`` with each select scan rewritten where SCIP's objective for the whole
    program (``objective(program)``: it maps the program as the pipeline does) is lower by
    GAIN_WANTED of it, or where a ``passes`` pin says so; and a ScanChoice per scan, in
    textual order. Each scan is weighed on the program with the earlier ones' choices made.
    A rewrite that finds no mapping is reported and the scan stays as written (unless
    pinned: then its error is raised)."""
    made: list[ScanChoice] = []
    kept = 0  # the scans left as written so far: the next to weigh is the one after them
    written_objective = None
    while True:
        model = analyses(program, context)
        scans = select_scans(program, model)
        if kept >= len(scans):
            break
        scan = scans[kept]
        pin = pins.get(scan.index)
        if written_objective is None:
            written_objective = objective(program)
        options: list[tuple[str, float | None, str]] = [("as written", written_objective, "")]
        rewritten = rewrite_scan(program, scan)
        with step(f"mapping with select scan '{scan.index}' as exact passes"):
            try:
                passes = objective(rewritten)
            except (MappingError, SolverError, ArgumentError, ProgramError) as err:
                if pin:
                    raise
                passes, why = None, first_line(err)
            else:
                why = ""
        options.append(("as exact passes", passes, why))
        if pin is not None:
            take = pin
        else:
            take = passes is not None and passes < written_objective * (1 - GAIN_WANTED)
        made.append(
            ScanChoice(
                scan.index,
                scan.describe(),
                tuple(options),
                int(take),
                scan.path,
                pinned=pin is not None,
                proof=_proof(scan),
            )
        )
        if take:
            program, written_objective = rewritten, passes
        else:
            kept += 1
    _check_pins(pins, program, analyses(program, context), {c.loop for c in made})
    return program, tuple(made)


def _proof(scan: SelectScan) -> str:
    return (
        f"the iterations of loop '{scan.index}' depend on one another only through "
        f"'{scan.position.buffer}' and '{scan.extreme.buffer}'"
    )


def _check_pins(pins: dict[str, bool], program: Program, model, weighed: set[str]) -> None:
    """Every ``passes`` pin names a select scan that was weighed; else an ArgumentError
    says that no loop has that name, or why its loop is none."""
    for index, passes in pins.items():
        if index in weighed:
            continue
        whys = [
            found[1]
            for found in candidates(program, model)
            if isinstance(found, tuple) and found[0].index == index
        ]
        if not whys:
            raise ArgumentError(
                f"pin '{index}': passes names no seq loop in a par loop's body of program '{program.name}'"
            )
        if passes:  # (passes=no on a loop that is no scan asks for what happens anyway)
            raise ArgumentError(f"pin '{index}': loop '{index}' is no select scan: {'; '.join(whys)}")


__all__ = ["choose_scans"]
