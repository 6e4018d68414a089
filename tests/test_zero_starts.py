"""Notes on updates that read an out buffer's starting zeros (``ir.zero_starts``): a row
maximum into an ``out`` buffer that nothing writes first is never below 0, which a new
user's walkthrough found silently accepted."""

from __future__ import annotations

import numpy as np
import pytest

import polymap
from polymap.ir.zero_starts import zero_start_notes
from polymap.reference import reference

ROW_MAX = """
param M = 3
param N = 5
in  X: f32[M, N]
out r: f32[M]
par M i {{
  {init}
  seq N j {{ r[i] {op} X[i, j] }}
}}
"""


def test_a_row_max_into_zeros_gets_a_note_in_the_report_and_in_check(tmp_path, capsys):
    program = polymap.parse(ROW_MAX.format(init="", op="max="), name="rmax")
    x = -np.abs(np.random.default_rng(1).standard_normal((3, 5))).astype(np.float32) - 0.5
    assert list(reference(program, X=x)["r"]) == [0, 0, 0]  # what the note warns of
    (note,) = zero_start_notes(program)
    assert "'r' is an out buffer, which starts as zeros" in note and "never below 0" in note
    assert "`r[i] max= X[i, j]` at 8:13" in note and "'r' = -inf first" in note
    mapping = polymap.optimize(program)
    assert note in mapping.report() and mapping.to_json()["notes"] == [note]
    path = tmp_path / "rmax.te"
    path.write_text(ROW_MAX.format(init="", op="max="))
    from polymap.cli import main

    assert main(["check", str(path)]) == 0
    assert "never below 0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "init, op, notes",
    [
        ("r[i] = -inf", "max=", 0),  # started: no note
        ("", "+=", 0),  # zero is +='s identity
        ("", "min=", 1),
        ("", "*=", 1),
    ],
)
def test_which_updates_get_a_note(init, op, notes):
    program = polymap.parse(ROW_MAX.format(init=init, op=op), name="rows")
    assert len(zero_start_notes(program)) == notes


def test_an_inout_buffer_starts_as_the_callers_and_gets_no_note():
    program = polymap.parse(ROW_MAX.format(init="", op="max=").replace("out r", "inout r"), name="rows")
    assert zero_start_notes(program) == ()
