"""``polymap bench --kernels`` without a GPU: the correctness part runs on the host and the
record says that the GPU figures are pending (no number is invented)."""

from __future__ import annotations

from pathlib import Path

from polymap.bench_kernels import CASES, Result, kernels_markdown, run_host_cases
from polymap.runtime.cuobjdump import cuobjdump_available
from polymap.runtime.nvrtc import nvrtc_available

ROOT = Path(__file__).resolve().parent.parent


def test_host_cases_match_the_reference_and_the_record_says_gpu_pending():
    cases = tuple(c for c in CASES if c.name in ("axpy 2^26", "matmul stride-32 A"))
    results = run_host_cases(ROOT, cases)
    assert [r.case for r in results] == ["axpy 2^26", "matmul stride-32 A"]
    for r in results:
        assert r.where == "host" and r.max_error < 1e-4 and r.samples_s == ()
        assert r.predicted_s > 0
    text = kernels_markdown(results, device="none", command="polymap bench --kernels", machine="test")
    assert "GPU timings are pending" in text
    assert "| axpy 2^26 | {'N': 1000} |" in text
    if nvrtc_available() and cuobjdump_available():  # the test extra installs both
        for r in results:
            assert r.machine_code and not r.machine_code_error
            (k,) = r.machine_code
            assert f"| {r.case} | {k.function} | {k.threads_per_block} | {k.resources.registers} / " in text
            edge = f"| {r.case} | {k.edge_function} (blocks at an edge, where there are any) | {k.threads_per_block} | "
            assert (edge in text) == (k.edge_resources is not None)
        # both run their blocks at an edge apart (several points a thread, more than one wave)
        assert all(r.machine_code[0].edge_function for r in results)
        # the strided matmul's k loop is a loop; axpy has none
        assert results[0].machine_code[0].hot is None and results[1].machine_code[0].hot is not None


def _gpu_result() -> Result:
    """A GPU row made by hand: polymap's samples 1, 3 and 2 ms, cuBLAS's 1 ms each."""
    return Result(
        "matmul 1024^3",
        {"M": 1024},
        "gpu",
        1e-5,
        2e-3,
        (1e-3, 3e-3, 2e-3),
        {"cublas": (1e-3, 1e-3, 1e-3)},
        methods={"polymap": "graph, 1 runs/sample", "cublas": "queued, 1 runs/sample (no graph: E)"},
    )


def test_gpu_record_shows_ratio_to_the_baseline_and_every_sample():
    result = _gpu_result()
    text = kernels_markdown([result], device="H100", command="c", machine="m")
    assert "| matmul 1024^3 | 2000.00 | 2000 | cublas | 1000.00 | 0.500 |" in text
    assert "polymap (graph, 1 runs/sample) [1000.0, 3000.0, 2000.0]" in text
    assert "cublas (queued, 1 runs/sample (no graph: E)): [1000.0, 1000.0, 1000.0]" in text


def test_a_record_without_machine_code_says_why():
    result = Result(
        "axpy 2^26", {"N": 1000}, "host", 0.0, 1e-6, machine_code_error="cuobjdump is not available"
    )
    text = kernels_markdown([result], device="none", command="c", machine="m")
    assert "| axpy 2^26 | (not read: cuobjdump is not available) |" in text


def test_a_model_named_to_bench_kernels_runs_on_the_host_against_the_reference(tmp_path, monkeypatch):
    """``polymap bench --kernels --host MODEL``: the model's own case, at sizes the host runs
    quickly, checked by the reference executor (a wrong kernel would show a large error)."""
    from polymap.cli import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "record.md"
    assert main(["bench", "--kernels", "--host", "-q", "models/matmul_256x256x32.te", "-o", str(out)]) == 0
    row = next(line for line in out.read_text().splitlines() if line.startswith("| matmul_256x256x32 |"))
    sizes, error = row.split(" | ")[1], float(row.split(" | ")[2])
    assert sizes == "{'M': 256, 'N': 256, 'K': 32}" and error < 1e-4


def test_bench_kernels_names_a_missing_model(tmp_path, capsys, monkeypatch):
    from polymap.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--kernels", "--host", "-q", "nowhere.te"]) == 1
    assert "bench --kernels: no such model file: nowhere.te" in capsys.readouterr().err


def test_bench_kernels_asks_for_default_sizes(tmp_path, capsys):
    from polymap.cli import main

    model = tmp_path / "nodef.te"
    model.write_text("param N\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i] * 2 }\n")
    assert main(["bench", "--kernels", "--host", "-q", str(model)]) == 1
    assert "nodef.te: size N has no default (write 'param N = <size>')" in capsys.readouterr().err


def test_errors_count_equal_infinities_as_equal_and_a_lone_nan_as_infinite():
    from types import SimpleNamespace

    import numpy as np

    from polymap.bench_kernels import _checked, compulsory_bytes
    from polymap.ir.nodes import DType

    def error(got, want, dtype=DType.F32):
        program = SimpleNamespace(outputs=[SimpleNamespace(name="y", dtype=dtype)])
        return _checked(program, {"y": got}, {"y": want})[0]

    inf, nan = np.inf, np.nan
    assert error(np.array([1.0, inf, nan, -inf]), np.array([1.5, inf, nan, -inf])) == 0.5
    assert error(np.array([nan]), np.array([1.0])) == inf
    assert error(np.array([inf]), np.array([-inf])) == inf
    assert error(np.array([3], np.int32), np.array([5], np.int32), DType.I32) == 2.0
    assert error(np.zeros(0), np.zeros(0)) == 0.0
    assert compulsory_bytes({"A": np.zeros((4, 8), np.float32)}, {"C": np.zeros(3, np.float64)}) == 128 + 24


def test_bench_kernels_json_is_the_record_as_data(tmp_path, capsys, monkeypatch):
    """``bench --kernels --json``: stdout is one JSON document (the progress lines go to
    stderr); on the host each case has its error and prediction and no GPU figure."""
    import json

    from polymap.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["bench", "--kernels", "--host", "--json", "models/matmul_256x256x32.te"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert "host run at" in captured.err
    assert main(["bench", "--kernels", "--host", "--json", "-q", "models/matmul_256x256x32.te"]) == 0
    assert capsys.readouterr().err == ""  # -q: no progress lines
    (case,) = document["cases"]
    assert case["case"] == "matmul_256x256x32" and case["where"] == "host"
    assert case["sizes"] == {"M": 256, "N": 256, "K": 32} and case["max_error"] < 1e-4
    assert case["median_s"] is None and case["samples_s"] == [] and case["baselines"] == []
    assert case["predicted_s"] > 0


def test_the_json_of_a_gpu_result_has_every_sample_and_the_ratio():
    import json

    from polymap.bench_kernels import kernels_json

    result = _gpu_result()
    document = json.loads(json.dumps(kernels_json([result], device="H100", command="c", machine="m")))
    (case,) = document["cases"]
    assert case["median_s"] == 2e-3 and case["samples_s"] == [1e-3, 3e-3, 2e-3]
    assert case["method"] == "graph, 1 runs/sample"
    (base,) = case["baselines"]
    assert base["baseline"] == "cublas" and base["median_s"] == 1e-3 and base["ratio"] == 0.5
    assert base["method"] == "queued, 1 runs/sample (no graph: E)" and document["device"] == "H100"


def test_a_wrong_kernel_fails_bench_kernels_and_the_record_says_mismatch(tmp_path, capsys, monkeypatch):
    """The record is written, the case says MISMATCH, and the exit status is 1: here the
    reference executor is replaced by one that is off by one in the last output."""
    import polymap.bench_kernels as bench_kernels
    from polymap.cli import main

    real = bench_kernels.reference

    def off_by_one(program, **inputs):
        want = real(program, **inputs)
        return {k: v + 1 for k, v in want.items()}

    monkeypatch.setattr(bench_kernels, "reference", off_by_one)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "record.md"
    assert main(["bench", "--kernels", "--host", "-q", "models/matmul_256x256x32.te", "-o", str(out)]) == 1
    assert "MISMATCH against the reference: matmul_256x256x32" in capsys.readouterr().err
    assert "| matmul_256x256x32 | {'M': 256, 'N': 256, 'K': 32} | 1 MISMATCH |" in out.read_text()


def test_bench_kernels_refuses_a_program_without_outputs_and_a_bad_output_path(tmp_path, capsys):
    from polymap.cli import main

    model = tmp_path / "inonly.te"
    model.write_text("param N = 16\nin x: f32[N]\n")
    assert main(["bench", "--kernels", "--host", "-q", str(model)]) == 1
    assert "inonly.te: the program has no out or inout buffer to check" in capsys.readouterr().err
    good = tmp_path / "copy.te"
    good.write_text("param N = 4\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = x[i] }\n")
    assert main(["bench", "--kernels", "--host", "-q", "-o", str(tmp_path), str(good)]) == 1
    assert f"cannot write {tmp_path}: not a file in an existing folder" in capsys.readouterr().err
