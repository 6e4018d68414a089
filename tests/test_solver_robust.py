"""The solver is honest, bounded and complete: time limits, SCIP's statuses, the target's
limits, extreme sizes and coefficients, pins that name nothing, launch counts in closed form."""

from __future__ import annotations

import math
import re

import pytest

import polymap
import polymap.mapping.solve as solve_module
from polymap import parse
from polymap.cli import main
from polymap.errors import ArgumentError, SolverError
from polymap.mapping.solve import DEFAULT_TIME_LIMIT_S, optimize

MATMUL = """
param M, N, K
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { C[i, j] = 0; seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""


def _matmul(size: int = 256):
    return parse(MATMUL, name="mm").bind(M=size, N=size, K=size)


# ------------------------------------------------------------------ time limits


def test_optimize_gives_scip_a_default_time_limit(monkeypatch):
    seen = []
    real = solve_module.solve

    def spy(model, *, time_limit_s=None):
        seen.append(time_limit_s)
        return real(model, time_limit_s=time_limit_s)

    monkeypatch.setattr(solve_module, "solve", spy)
    optimize(_matmul(64))
    assert seen and all(limit == DEFAULT_TIME_LIMIT_S == 30.0 for limit in seen)
    seen.clear()
    optimize(_matmul(64), time_limit=7)
    assert seen and all(limit == 7.0 for limit in seen)


@pytest.mark.parametrize("bad", [-1, 0, math.nan, math.inf, -math.inf, "10", True, [3]])
def test_a_time_limit_that_is_not_a_finite_positive_number_is_an_argument_error(bad):
    with pytest.raises(ArgumentError, match="time_limit must be a finite number of seconds > 0"):
        optimize(_matmul(64), time_limit=bad)
    with pytest.raises(ArgumentError, match="time_limit"):
        polymap.compile(_matmul(64), time_limit=bad)


@pytest.mark.parametrize("command", ["map", "emit", "run"])
def test_the_cli_takes_a_time_limit_and_refuses_a_bad_one(command, tmp_path, capsys):
    path = tmp_path / "mm.te"
    path.write_text(MATMUL)
    sizes = ["--size", "M=32", "--size", "N=32", "--size", "K=8"]
    assert main([command, str(path), *sizes, "--time-limit", "nan"]) == 1
    assert "time_limit must be a finite number of seconds > 0, got nan" in capsys.readouterr().err.replace(
        " (or None for the default 30 s)", "")
    assert main([command, str(path), *sizes, "--time-limit", "-1"]) == 1
    assert "got -1.0" in capsys.readouterr().err


def test_bench_takes_a_time_limit(tmp_path, capsys):
    path = tmp_path / "mm.te"
    path.write_text(MATMUL.replace("param M, N, K", "param M = 32, N = 32, K = 8"))
    assert main(["bench", str(path), "--repeats", "1", "--time-limit", "0"]) == 1
    assert "time_limit must be a finite number" in capsys.readouterr().err
    assert main(["bench", str(path), "--repeats", "1", "--time-limit", "20"]) == 0
    assert "SCIP optimal" in capsys.readouterr().out


def test_no_feasible_mapping_within_the_time_limit_is_a_solver_error_naming_kernel_and_limit():
    with pytest.raises(SolverError, match=r"kernel kernel0: SCIP stopped with status 'timelimit' and no feasible "
                                          r"mapping within the time limit of 0\.001 s; raise time_limit"):
        optimize(parse(MATMUL).bind(M=1024, N=1024, K=1024), time_limit=0.001)


# a 3-deep band with a quasi-affine extent on which SCIP needs far more than a few seconds
# to close its gap (found by a random program generator), though it finds a mapping at once
SLOW = """
in A: f32[200, 200, 200]
out B0: f32[200, 200, 200]
out B1: f32[200, 200, 200]
par 32 i { par (i + 5) / 4 + 1 j { par 48 k {
  B0[i, j, k] = A[j, k, j] + A[j, i, (k * 5) / 4]
  B1[i, j, k] = A[k, k, k] + A[(j + i) / 2, j, k]
} } }
"""


def test_a_mapping_found_before_the_time_limit_is_returned_and_reported_as_timelimit():
    mapping = optimize(parse(SLOW, name="slow"), time_limit=1)
    report = mapping.solver[0]
    assert report.status == "timelimit" and not report.optimal
    assert report.solve_time_s < 1.5
    assert report.objective is not None and report.gap is not None and report.gap > 0
    assert report.dual_bound < report.objective
    text = str(mapping)
    assert re.search(r"SCIP timelimit in \d+\.\d+ s: objective [\d.e+-]+ us, dual bound [\d.e+-]+ us, gap "
                     r"[\d.]+% \(stopped at the time limit: the best mapping found, not proved optimal\)", text)
    assert "SCIP optimal" not in text
    assert mapping.proofs  # the mapping returned is still proved
