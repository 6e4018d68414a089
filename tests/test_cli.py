"""The `polymap` command: check prints the model and proves validity; errors exit non-zero."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from polymap.cli import main

MODELS = Path(__file__).resolve().parent.parent / "models"


def _write(tmp_path: Path, text: str, name: str = "prog.te") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_check_prints_domains_accesses_dependences_and_race_free_loops(tmp_path, capsys):
    path = _write(tmp_path, "param N\nin A: f32[N]\nout B: f32[N]\npar N i {\n  B[i] = A[i] * 2\n}\n")
    assert main(["check", path]) == 0
    out = capsys.readouterr().out
    assert "S0 `B[i] = A[i] * 2` at 5:3" in out
    assert re.search(r"domain: .*S0\[i\] : 0 <= i < N", out)
    assert re.search(r"write B\[i\]: .*S0\[i\] -> B\[i\]", out)
    assert re.search(r"read  A\[i\]: .*S0\[i\] -> A\[i\]", out)
    assert "par loop 'i' at 4:1" in out
    assert out.rstrip().endswith("prog.te: valid")


def test_check_binds_sizes_from_the_command_line(tmp_path, capsys):
    path = _write(tmp_path, "param N\nout B: f32[N]\npar N i { B[i] = 1 }\n")
    assert main(["check", path, "--size", "N=7"]) == 0
    assert "S0[i] : 0 <= i <= 6" in capsys.readouterr().out


def test_check_reports_a_race_with_line_and_column(tmp_path, capsys):
    path = _write(tmp_path, "param N\nin A: f32[N]\nout s: f32[1]\npar N i {\n  s[0] += A[i]\n}\n")
    assert main(["check", path]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert re.search(r"prog\.te:\d+:\d+: .*par loop 'i'", err)
    assert "s[0]" in err


def test_check_reports_an_out_of_bounds_access(tmp_path, capsys):
    path = _write(tmp_path, "param N\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i + 1] }\n")
    assert main(["check", path]) == 1
    assert re.search(r"prog\.te:4:\d+: .*A\[i \+ 1\]", capsys.readouterr().err)


def test_check_reports_syntax_errors_with_a_caret(tmp_path, capsys):
    path = _write(tmp_path, "out B: f32[4]\npar 4 i { B[i] = * }\n")
    assert main(["check", path]) == 1
    err = capsys.readouterr().err
    assert "prog.te:2:18: expected an expression but found '*'" in err
    assert err.splitlines()[-1] == " " * (4 + 17) + "^"


def test_check_binds_defaults_that_flat_indices_need_and_says_so(tmp_path, capsys):
    path = _write(
        tmp_path,
        "param N = 8\nin X: f32[N * N]\nout Y: f32[N * N]\npar N * N p { Y[(p % N) * N + p / N] = X[p] }\n",
    )
    assert main(["check", path]) == 0
    assert "note: bound N = 8 (default)" in capsys.readouterr().out


def test_flat_index_without_a_default_is_an_error_naming_the_size(tmp_path, capsys):
    path = _write(tmp_path, "param N\nin X: f32[N * N]\nout Y: f32[N * N]\npar N * N p { Y[p] = X[p] }\n")
    assert main(["check", path]) == 1
    assert re.search(r"bind N", capsys.readouterr().err)


def test_bad_size_argument_is_a_usage_error(tmp_path):
    path = _write(tmp_path, "param N\nout B: f32[N]\npar N i { B[i] = 1 }\n")
    with pytest.raises(SystemExit) as info:
        main(["check", path, "--size", "N=abc"])
    assert info.value.code == 2


def test_unknown_size_and_missing_file_are_clear_errors(tmp_path, capsys):
    path = _write(tmp_path, "param N\nout B: f32[N]\npar N i { B[i] = 1 }\n")
    assert main(["check", path, "--size", "Q=3"]) == 1
    assert "cannot bind size 'Q'" in capsys.readouterr().err
    for command in ("check", "map", "emit", "run"):  # the last would win without a word
        assert (
            main([command, path, "--size", "N=4", "--size", "N=5", "-q"][: 6 if command == "check" else 7])
            == 1
        )
        assert "--size N given more than once" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "nope.te")]) == 1
    assert "cannot read program file" in capsys.readouterr().err


@pytest.mark.parametrize("model", sorted(MODELS.glob("*.te")), ids=lambda p: p.name)
def test_check_succeeds_on_every_model(model, capsys):
    assert main(["check", str(model)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"{model}: valid")


def test_console_script_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "polymap.cli", "check", str(MODELS / "transpose.te")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "race-free par loops" in result.stdout


def test_version_is_printed(capsys):
    from polymap.version import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"polymap {__version__}"


def test_one_block_is_one_block_in_the_report(capsys):
    assert main(["map", str(MODELS / "gpt3_attention_tiny.te")]) == 0
    out = capsys.readouterr().out
    assert "1 blocks" not in out and re.search(r"\b1 block\b", out)


def test_map_counts_the_proofs_in_one_line_and_lists_them_with_the_proofs_option(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text("param N = 64\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] + 1 }\n")
    assert main(["map", str(program)]) == 0
    out = capsys.readouterr().out
    assert "proved:" not in out
    assert (
        "proved by isl for every size >= 1: 3 obligations (in bounds 1, race free 1, exactly once 1)" in out
    )
    assert main(["map", str(program), "--proofs"]) == 0
    listed = [line.strip() for line in capsys.readouterr().out.splitlines() if "proved:" in line]
    assert listed[1:] == [
        "proved: kernel0: every access of S0 in bounds",
        "proved: kernel0: no race between threads on B",
        "proved: kernel0: every instance of S0 executed exactly once",
    ]


def test_map_reads_a_gpu_target_file_and_names_a_bad_one(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text("param N = 4096\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] + 1 }\n")
    target = tmp_path / "my gpu.toml"
    target.write_text('base = "l40s"\nname = "My L40S"\ndram_bandwidth = 432e9\n')
    assert main(["map", str(program), "--target", str(target)]) == 0
    out = capsys.readouterr().out
    assert "mapping of program copy for My L40S" in out
    # 2 x 4096 x 4 bytes at half an L40S's bandwidth: 0.0759 us
    assert re.search(r"memory 0\.0758\d* us", out)
    target.write_text('base = "l40s"\nsm_count = 0\n')
    assert main(["map", str(program), "--target", str(target)]) == 1
    err = capsys.readouterr().err
    assert "my gpu.toml" in err and "'sm_count' must be a positive integer" in err
    assert "Traceback" not in err


def test_a_reader_that_leaves_early_is_not_a_traceback(tmp_path):
    program = tmp_path / "copy.te"
    program.write_text("param N = 64\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] + 1 }\n")
    done = subprocess.run(
        f"'{sys.executable}' -m polymap.cli map '{program}' --proofs | head -1",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.startswith("mapping of program copy")
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr


def test_repeats_on_the_host_says_that_it_times_gpu_runs_only(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text("param N = 64\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] + 1 }\n")
    assert main(["run", str(program), "--host", "--repeats", "3"]) == 0
    assert "note: --repeats 3 times GPU runs; the host run checks correctness once" in capsys.readouterr().out
    assert main(["run", str(program), "--host"]) == 0
    assert "--repeats" not in capsys.readouterr().out


def test_bench_names_an_output_it_cannot_write(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text("param N = 64\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] }\n")
    missing = tmp_path / "missing" / "bench.md"
    assert main(["bench", str(program), "--repeats", "1", "-q", "-o", str(missing)]) != 0
    assert f"cannot write {missing}" in capsys.readouterr().err
