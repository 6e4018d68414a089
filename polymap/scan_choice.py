"""Which select scans to rewrite as exact passes (``transform.scans``): a choice made on
SCIP's costs, the way ``split_choice.choose_splits`` chooses a reduction's parts. The
program is mapped as written and with the scan rewritten, and the cheaper kept; the
rewrite's passes run on the lanes where SCIP finds that cheaper (an argmax over rows of
1024: one thread per row fills 1.5% of an H100), while a short scan stays in its thread.
"""

from __future__ import annotations

from polymap.errors import ArgumentError, MappingError, ProgramError, SolverError
from polymap.ir.nodes import Program
from polymap.ir.walk import loops
from polymap.mapping.result import ScanChoice
from polymap.progress import step
from polymap.split_choice import GAIN_WANTED, first_line
from polymap.transform.scans import SelectScan, candidates, rewrite_scan, select_scans


def choose_scans(
    program: Program, objective, pins: dict[str, bool], *, analyses, context, split_objective=None
):
    """``program`` with each select scan rewritten where SCIP's objective for the whole
    program (``objective(program)``: it maps the program as the pipeline does) is lower by
    GAIN_WANTED of it, or where a ``passes`` pin says so; and a ScanChoice per scan, in
    textual order. A scan at the top level is weighed by ``split_objective`` (the program
    mapped with its reductions split where that pays, ``split_choice.choose_splits``) in
    both forms where it is given: as written it is one thread, and its passes gain only once
    split into parts. Each scan is weighed on the program with the earlier ones' choices made.
    A form that finds no mapping (pins that only the other one meets, say) is reported and
    the other taken; where neither maps, or the pinned one does not, its error is raised."""
    made: list[ScanChoice] = []
    kept = 0  # the scans left as written so far: the next to weigh is the one after them
    # the current program's objective, or why it has none, and the objective it was weighed by
    written: tuple[float | None, Exception | None, object] | None = None
    while True:
        model = analyses(program, context)
        scans = select_scans(program, model)
        if kept >= len(scans):
            break
        scan = scans[kept]
        pin = pins.get(scan.index)
        weigh = split_objective if split_objective is not None and len(scan.path) == 1 else objective
        if written is None or written[2] is not weigh:
            written = (*_mapped(weigh, program), weigh)
        rewritten = rewrite_scan(program, scan)
        with step(f"mapping with select scan '{scan.index}' as exact passes"):
            passes = (*_mapped(weigh, rewritten), weigh)
        (as_written, written_error, _), (as_passes, passes_error, _) = written, passes
        if pin is not None:
            take = pin
        elif as_written is None or as_passes is None:
            take = as_passes is not None
        else:
            take = as_passes < as_written * (1 - GAIN_WANTED)
        error = passes_error if take else written_error
        if error is not None:  # the form taken has no mapping: pinned, or neither has one
            raise error
        made.append(
            ScanChoice(
                scan.index,
                scan.describe(),
                (
                    ("as written", as_written, _why(written_error)),
                    ("as exact passes", as_passes, _why(passes_error)),
                ),
                int(take),
                scan.path,
                pinned=pin is not None,
                proof=_proof(scan),
            )
        )
        if take:
            program, written = rewritten, passes
        else:
            kept += 1
    _check_pins(pins, program, analyses(program, context), {c.loop for c in made})
    return program, tuple(made)


def _mapped(objective, program: Program) -> tuple[float | None, Exception | None]:
    """SCIP's objective for ``program``, or None and why it has no mapping."""
    try:
        return objective(program), None
    except (MappingError, SolverError, ArgumentError, ProgramError) as err:
        return None, err


def _why(error: Exception | None) -> str:
    return first_line(error) if error is not None else ""


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
            par = any(loop.index == index and loop.is_par for loop, _ in loops(program))
            raise ArgumentError(
                f"pin '{index}': '{index}' is a par loop; passes applies to a select scan's seq loop"
                if par
                else f"pin '{index}': passes names no seq loop in a par loop's body or at the top level "
                f"of program '{program.name}'"
            )
        if passes:  # (passes=no on a loop that is no scan asks for what happens anyway)
            raise ArgumentError(f"pin '{index}': loop '{index}' is no select scan: {'; '.join(whys)}")


__all__ = ["choose_scans"]
