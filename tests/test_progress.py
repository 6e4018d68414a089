"""Progress lines: silent by default in the API, a line per slow step and SCIP's incumbent on
request (the command line asks, unless --quiet)."""

from __future__ import annotations

import io

import polymap
from polymap.cli import main
from polymap.progress import reporting, step

COPY = "param N = 64\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] + 1 }\n"


def test_the_api_is_silent_and_a_reporter_hears_every_step_and_scip(capsys):
    program = polymap.parse(COPY, name="copy")
    polymap.compile(program)
    assert capsys.readouterr() == ("", "")
    lines = io.StringIO()
    with reporting(lines, after_s=0.0, every_s=0.0):  # every step, every SCIP event
        polymap.compile(program)
    text = lines.getvalue()
    for name in ("analysis", "mapping of kernel0", "proof by isl", "code generation"):
        assert f"polymap: {name}" in text, text
    assert "polymap: kernel0: SCIP at 0 s, " in text
    assert capsys.readouterr() == ("", "")  # the reporter's stream only


def test_a_step_shorter_than_the_threshold_says_nothing():
    lines = io.StringIO()
    with reporting(lines, after_s=60.0):
        with step("quick"):
            pass
    assert lines.getvalue() == ""


def test_the_command_line_is_quiet_on_fast_steps_and_with_quiet(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text(COPY)
    assert main(["map", str(program)]) == 0
    assert capsys.readouterr().err == ""  # every step took under a second
    assert main(["map", "-q", str(program)]) == 0
    assert capsys.readouterr().err == ""
