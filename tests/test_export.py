"""The mapping report as JSON (``polymap map --json``): the same numbers as the text report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from polymap import optimize, parse
from polymap.cli import main
from polymap.ir.parse import load
from polymap.mapping.export import finite_or_none

MODELS = Path(__file__).resolve().parent.parent / "models"


def test_the_json_of_the_transpose_is_its_report_as_data():
    mapping = optimize(load(MODELS / "transpose.te"))
    data = json.loads(json.dumps(mapping.to_json(), allow_nan=False))
    text = str(mapping)
    assert data["program"] == "transpose" and data["target"] == {"name": "NVIDIA H100 SXM5", "arch": "sm_90"}
    assert data["cost_sizes"] == {"M": 4096, "N": 4096}
    (kernel,) = data["kernels"]
    mapped, cost = mapping.kernels[0], mapping.costs[0]
    assert kernel["grid"] == list(mapped.grid_dim()) and kernel["block"] == list(mapped.block_dim())
    assert f"grid {tuple(kernel['grid'])} x block {tuple(kernel['block'])}" in text
    assert [(loop["index"], loop["thread_axis"], loop["threads"]) for loop in kernel["loops"]] == [
        (m.index, m.thread_axis.value, m.threads) for m in mapped.loops
    ]
    staged = mapped.staging
    assert kernel["staging"] == {
        "loop": None,
        "tile": 1,
        "buffers": ["A"],
        "transposed": [],
        "copy_vectors": dict(staged.copy_vectors),
        "slots": 1,  # one tile over the whole body: nothing to double-buffer
    }
    # 4096 x 4096 floats copied into the tiles once: 64 MiB, as the text's copy row says
    copy = next(a for a in kernel["cost"]["accesses"] if a["statement"] == "copy")
    assert copy["bytes"] == 4096 * 4096 * 4 and f" {copy['bytes']}" in text
    assert kernel["cost"]["time_s"] == cost.time_s and kernel["cost"]["objective_s"] == cost.objective_s
    solver = kernel["solver"]
    assert solver["outcome"] == "optimal" and solver["status"] == "optimal" and solver["gap"] == 0
    assert solver["objective_us"] == mapping.solver[0].objective
    assert data["predicted_time_s"] == mapping.predicted_time_s
    assert data["proof"]["proved"] is True and data["proof"]["sizes"] == "every size >= 1"
    kinds = {p["obligation"] for p in kernel["proof"]["proved"]}
    assert kinds == {
        "in bounds",
        "race free",
        "exactly once",
        "staging coverage",
        "barriers",
        "vector copies",
    }


def test_a_serial_kernel_and_a_missing_bound_are_plain_json():
    mapping = optimize(parse("in A: f32[4]\nout s: f32\ns = 0\nseq 4 k { s += A[k] }\n", name="sum4"))
    data = json.loads(json.dumps(mapping.to_json(), allow_nan=False))
    kernel = data["kernels"][1]  # s = 0, then the serial sum
    assert kernel["loops"] == [] and kernel["grid"] == [1, 1, 1] and kernel["block"] == [1, 1, 1]
    assert kernel["solver"]["outcome"] == "no decisions" and kernel["solver"]["dual_bound_us"] is None
    assert (
        finite_or_none(-math.inf) is None
        and finite_or_none(math.inf) is None
        and finite_or_none(None) is None
    )
    assert finite_or_none(2.5) == 2.5


def test_map_json_prints_only_json_on_stdout(tmp_path, capsys):
    program = tmp_path / "flat.te"
    program.write_text(
        "param N = 8\nin A: f32[N * N]\nout B: f32[N * N]\npar N i { par N j { B[i * N + j] = A[i * N + j] } }\n"
    )
    assert main(["map", str(program), "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # the whole of stdout
    assert data["program"] == "flat" and data["kernels"][0]["solver"]["outcome"] == "optimal"
    assert "note: bound N = 8 (default)" in captured.err


COPY = "param N = 64\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] + 1 }\n"


def test_run_json_holds_the_mapping_each_output_and_the_run(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text(COPY)
    assert main(["run", str(program), "--host", "--json", "--seed", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["seed"] == 3 and data["sizes"] == {"N": 64}
    assert data["outputs"] == [
        {
            "output": "B",
            "ok": True,
            "max_abs_error": 0.0,
            "max_abs_reference": data["outputs"][0]["max_abs_reference"],
            "exact": False,
            "checked": True,
        }
    ]
    assert data["outputs"][0]["max_abs_reference"] > 1  # A + 1 for A drawn around 0
    assert data["ran"]["on"] == "host" and data["ran"]["seconds"] > 0
    assert data["mapping"]["program"] == "copy"


def test_run_json_says_a_mismatch_with_exit_status_1(tmp_path, capsys, monkeypatch):
    module = sys.modules["polymap.reference"]
    real = module.reference

    def wrong(program, **arrays):
        return {name: np.asarray(value) + 0.5 for name, value in real(program, **arrays).items()}

    monkeypatch.setattr(module, "reference", wrong)
    program = tmp_path / "copy.te"
    program.write_text(COPY)
    assert main(["run", str(program), "--host", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["outputs"][0]["ok"] is False
    assert data["outputs"][0]["max_abs_error"] == pytest.approx(0.5)


def test_run_without_the_reference_checks_nothing_and_says_so(tmp_path, capsys, monkeypatch):
    module = sys.modules["polymap.reference"]

    def never(program, **arrays):
        raise AssertionError("run --no-reference computed the reference")

    monkeypatch.setattr(module, "reference", never)
    program = tmp_path / "copy.te"
    program.write_text(COPY)
    assert main(["run", str(program), "--host", "--no-reference", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is None
    assert data["outputs"] == [{"output": "B", "ok": None, "checked": False}]
    assert main(["run", str(program), "--host", "--no-reference", "-q"]) == 0
    out = capsys.readouterr().out
    assert "B: not checked (--no-reference)" in out and "OK" not in out and "MISMATCH" not in out


def test_bench_json_records_each_model_and_kernel_as_scip_reported_them(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text(COPY)
    out = tmp_path / "bench.json"
    assert main(["bench", str(program), "--repeats", "1", "--json", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"wrote {out}" and "copy: " in captured.err  # the progress of each model
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    assert data["target"] == "NVIDIA H100 SXM5" and data["command"].startswith("polymap ")
    assert run["model"] == "copy" and run["sizes"] == "N=64" and run["median_wall_s"] > 0
    (kernel,) = run["kernels"]
    assert kernel["kernel"] == "kernel0" and kernel["status"] == "optimal" and kernel["gap"] == 0
    assert kernel["objective_us"] == pytest.approx(kernel["dual_bound_us"], rel=1e-9)
    # with --kernels, --json is the kernels' record (tests/test_bench_kernels.py)
    assert main(["bench", str(program), "--kernels", "--host", "--json", "-q"]) == 0
    (case,) = json.loads(capsys.readouterr().out)["cases"]
    assert case["case"] == "copy" and case["max_error"] == 0
