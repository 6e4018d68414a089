"""Host runs at practical sizes (``runtime/host_sizes.py``, ``polymap run --host``)."""

from __future__ import annotations

import json

import pytest

import polymap.runtime.host_sizes as host_sizes
from polymap import parse
from polymap.cli import main
from polymap.poly.model import analyze
from polymap.runtime.host_sizes import host_run_sizes

MATMUL = """
param M = 8192, N = 8192, K = 8192
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""
DEFAULTS = {"M": 8192, "N": 8192, "K": 8192}


def test_the_largest_default_size_is_halved_until_the_program_fits():
    # 2 operations (the multiply and the +=) per instance: 2 * 8192^3 = 1.1e12 > 1e11;
    # halving M, N, K, M, N, K gives 2 * 2048^3 = 1.7e10 <= 2e10 (HOST_FIT_FLOPS)
    fit = host_run_sizes(analyze(parse(MATMUL)), DEFAULTS, given=set())
    assert fit.reduced and fit.asked == DEFAULTS
    assert fit.sizes == {"M": 2048, "N": 2048, "K": 2048}
    assert (fit.flops_asked, fit.flops) == (2 * 8192**3, 2 * 2048**3)
    assert "running on the host at M = 2048, N = 2048, K = 2048" in fit.note()


def test_sizes_the_user_gave_and_the_context_are_kept():
    model = analyze(parse(MATMUL))
    given = host_run_sizes(model, DEFAULTS, given={"M"})
    assert given.sizes == {"M": 8192, "N": 1024, "K": 1024}
    bounded = host_run_sizes(analyze(parse(MATMUL), context="K >= 8192"), DEFAULTS, given=set())
    assert bounded.sizes["K"] == 8192 and bounded.flops <= host_sizes.HOST_FIT_FLOPS
    small = {"M": 64, "N": 64, "K": 64}
    assert host_run_sizes(model, small, given=set()).sizes == small  # within the limit: as asked
    # 2 * 4096 * 2048 * 2048 = 3.4e10: over HOST_FIT_FLOPS, within HOST_FLOPS: as asked
    within = {"M": 4096, "N": 2048, "K": 2048}
    assert host_run_sizes(model, within, given=set()).sizes == within


def test_run_on_the_host_says_which_sizes_it_ran_and_checks_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(host_sizes, "HOST_FLOPS", 2 * 64 * 32 * 32)
    monkeypatch.setattr(host_sizes, "HOST_FIT_FLOPS", 2 * 64 * 32 * 32)
    program = tmp_path / "mm.te"
    program.write_text(MATMUL.replace("8192", "64"))
    assert main(["run", str(program), "--host", "-q", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["sizes_asked"] == {"M": 64, "N": 64, "K": 64}
    assert data["sizes"] == {"M": 32, "N": 32, "K": 64}
    assert data["ok"] is True and data["outputs"][0]["checked"]
    assert "running on the host at M = 32, N = 32, K = 64" in captured.err
    assert main(["run", str(program), "--host", "-q", "--size", "M=64", "--size", "N=64"]) == 0
    assert "running on the host at K = 16 " in capsys.readouterr().out  # only K was a default
    assert (
        main(["run", str(program), "--host", "-q", "--size", "M=64", "--size", "N=64", "--size", "K=64"]) == 0
    )
    assert "running on the host" not in capsys.readouterr().out  # every size given: as asked


def test_sizes_the_context_ties_together_halve_together_and_a_run_over_the_limit_says_so():
    tied = host_run_sizes(analyze(parse(MATMUL), context="N = K"), DEFAULTS, given=set())
    # M to 4096; then N alone would leave the context: M, N and K halve together, twice
    # (2 * 1024 * 2048 * 2048 = 8.6e9 <= 2e10)
    assert tied.sizes == {"M": 1024, "N": 2048, "K": 2048} and not tied.over
    stuck = host_run_sizes(analyze(parse(MATMUL)), DEFAULTS, given={"M", "N", "K"})
    assert not stuck.reduced and stuck.over
    assert "the sizes given with --size or the context keep it there" in stuck.note()
    # a fused program's sizes are the plan's numbers: the note names what fixed them
    planned = host_run_sizes(
        analyze(parse(MATMUL).bind(**DEFAULTS)), {}, given=set(), kept_by="the sizes --fuse planned at"
    )
    assert planned.over and "and the sizes --fuse planned at keep it there" in planned.note()
    assert "--size" not in planned.note()
    assert host_run_sizes(analyze(parse(MATMUL)), {"M": 8, "N": 8, "K": 8}, given=set()).note() is None


@pytest.mark.parametrize("sizes", [{"M": 0, "N": 1, "K": 1}])
def test_sizes_outside_the_context_are_refused_by_the_check(sizes):
    assert not analyze(parse(MATMUL)).in_context(sizes)


def test_a_program_of_no_operations_is_held_to_the_hosts_memory():
    """A copy of 2 * 10^9 floats does no arithmetic, but its two buffers (16 GB) would exhaust
    the host: the sizes halve until every buffer together is within HOST_BYTES."""
    from polymap.runtime.host_sizes import HOST_BYTES, program_bytes

    copy = analyze(parse("param N = 2000000000\nin x: f32[N]\nout z: f32[N]\npar N i { z[i] = x[i] }"))
    fit = host_run_sizes(copy, {"N": 2_000_000_000}, given=set())
    assert fit.sizes == {"N": 250_000_000} and fit.flops == 0
    assert fit.bytes == program_bytes(copy, fit.sizes) == 2 * 4 * 250_000_000 <= HOST_BYTES
    assert fit.bytes_asked == 16_000_000_000 and fit.reduced and not fit.over
    assert "0 operations on 1.6e+10 bytes of buffers" in fit.note()
    assert "running on the host at N = 250000000 (0 operations, 2e+09 bytes)" in fit.note()
