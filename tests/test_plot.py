"""The pictures (issue 15): ``polymap map --plot`` and ``polymap bench --plot``. The
picture's warp requests are computed from the index expressions and the mapping's formulas,
apart from the cost model: they are checked against the model's sector counts, against
hand-worked addresses, and rendered to files whose format is checked."""

from __future__ import annotations

import builtins
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import polymap
from polymap.cli import main
from polymap.errors import ArgumentError
from polymap.ir.nodes import IConst
from polymap.ir.parse import parse
from polymap.mapping.space import Axis, Distribution, LoopMapping
from polymap.plot import locate, place, plot_mapping, plot_roofline, roofline_points, warp_requests

ROOT = Path(__file__).resolve().parent.parent


@given(
    threads=st.sampled_from([1, 2, 8, 32]),
    seq=st.sampled_from([1, 2, 4, 8]),
    distribution=st.sampled_from(list(Distribution)),
    index=st.integers(0, 1000),
)
def test_locate_inverts_the_loops_formula(threads, seq, distribution, index):
    if distribution is Distribution.GROUPED and seq < 4:
        distribution = Distribution.BLOCKED  # no group strictly between 1 and S
    group = seq // 2 if distribution is Distribution.GROUPED else 1
    loop = LoopMapping("i", Axis.X, Axis.X, threads, seq, distribution, IConst(1001), 1001, group=group)
    p = locate(loop, index)
    assert 0 <= p.thread < threads and 0 <= p.point < seq
    assert place(loop, p.block, p.thread, p.point) == index


def test_a_transposes_warp_reads_a_row_and_writes_a_column_by_hand():
    program = parse(
        "param N = 256\nin A: f32[N, N]\nout B: f32[N, N]\npar N i { par N j { B[j, i] = A[i, j] } }"
    )
    pins = {"i": {"thread": "x", "threads": 32, "seq": 1}, "j": {"thread": "y", "threads": 4, "seq": 1}}
    mapping = polymap.optimize(program.bind_defaults(), pins=pins, staging=False)
    (km,) = mapping.kernels
    requests = {r.text: r for r in warp_requests(mapping, km)}
    # lanes run i = 0..31 at j = 0: A[i, 0] is 1 KiB apart per lane, B[0, i] 4 bytes apart
    assert requests["read A[i, j]"].addresses == tuple(1024 * i for i in range(32))
    assert requests["read A[i, j]"].sectors == 32
    assert requests["write B[j, i]"].addresses == tuple(4 * i for i in range(32))
    assert requests["write B[j, i]"].sectors == 4


MODELS_DRAWN = [
    "transpose",
    "matmul_256x256x32",
    "axpy",
    "gemv",
    "softmax_rows",
    "jacobi1d",
    "conv2d_padded",
    "syrk_lower",
]


@pytest.mark.parametrize("model", MODELS_DRAWN)
def test_the_pictures_first_request_never_exceeds_the_models_sectors(model):
    """The model bounds a request's sectors over the whole domain for a request that starts
    a sector (it does not know where a buffer's rows start); the first warp's first request,
    computed here from the addresses and counted from its lowest one, is one of them."""
    mapping = polymap.optimize(polymap.load(ROOT / "models" / f"{model}.te"))
    for km, cost in zip(mapping.kernels, mapping.costs):
        bound = {(a.statement, a.access, a.is_write): a.sectors_per_request for a in cost.accesses}
        for request in warp_requests(mapping, km):
            access = request.text.split(" ", 1)[1]
            key = (request.statement, access, request.is_write)
            assert request.aligned_sectors <= bound[key], (km.kernel.name, request.text)
            # a misaligned request touches at most one more sector than from its lowest byte
            assert request.aligned_sectors <= request.sectors <= request.aligned_sectors + 1


def test_a_shifted_read_straddles_one_more_sector_than_the_model_counts():
    mapping = polymap.optimize(polymap.load(ROOT / "models" / "jacobi1d.te"))
    requests = {r.text: r for r in warp_requests(mapping, mapping.kernels[0])}
    shifted = requests["read A[i + 1]"]  # lanes read A[1..32]: bytes 4..131
    assert shifted.touched == [4 * (i + 1) for i in range(32)]
    assert (shifted.sectors, shifted.aligned_sectors) == (5, 4)


def test_an_if_leaves_its_lanes_out_and_an_update_reads_its_target():
    text = """param N = 64
in x: f32[N]
inout y: f32[N]
par N i { if i >= 40 { y[i] += x[i] } }"""
    mapping = polymap.optimize(parse(text).bind_defaults(), pins={"i": {"threads": 64, "seq": 1}})
    requests = warp_requests(mapping, mapping.kernels[0])
    assert [r.text for r in requests] == ["read y[i]", "read x[i]", "write y[i]"]
    # the first warp runs i = 0..31, where the if never holds
    assert all(not r.touched for r in requests)


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_map_plot_draws_every_kernel_into_a_png_and_an_svg(tmp_path, capsys):
    png, svg = tmp_path / "m.png", tmp_path / "m.svg"
    assert main(["map", str(ROOT / "models" / "gpt3_attention_tiny.te"), "--plot", str(png)]) == 0
    assert _is_png(png) and png.stat().st_size > 10_000
    assert f"drew the mapping into {png}" in capsys.readouterr().err
    mapping = polymap.optimize(polymap.load(ROOT / "models" / "axpy.te"))
    plot_mapping(mapping, svg)
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()


def test_a_serial_kernel_is_drawn_as_one_thread(tmp_path):
    program = parse("param N = 8\nin x: f32[N]\nout s: f32\nseq N i { s += x[i] }")
    path = plot_mapping(polymap.optimize(program.bind_defaults()), tmp_path / "serial.png")
    assert _is_png(path)


def test_the_roofline_places_axpy_at_its_intensity(tmp_path):
    mapping = polymap.optimize(polymap.load(ROOT / "models" / "axpy.te"))
    (point,) = roofline_points([("axpy", mapping)])
    # z = alpha * x + y: 2 flops per element; per warp request x, y and z move 4 sectors
    # each, and alpha is a kernel parameter (by value): 12 * 32 bytes per 32 elements
    assert point.intensity == pytest.approx(2 / 12, rel=1e-6)
    cost = mapping.costs[0]
    assert point.flops_per_s == pytest.approx(cost.flops / cost.time_s)
    assert _is_png(plot_roofline([("axpy", mapping)], tmp_path / "roof.png"))


def test_the_hierarchical_roofline_puts_a_caches_bound_kernel_on_the_caches_roof(tmp_path):
    """softmax_rows is bound by the caches' roof (its rows re-read from L2): its hollow
    point, at flops per byte of all its traffic, lies on that roof; its DRAM point lies
    under the DRAM roof, further right (DRAM moves each row once)."""
    mapping = polymap.optimize(polymap.load(ROOT / "models" / "softmax_rows.te"))
    cost = mapping.costs[0]
    assert cost.bound_by == "caches" and cost.fill == 1
    (point,) = roofline_points([("softmax_rows", mapping)])
    caches, dram = mapping.target.cache_bandwidth, mapping.target.dram_bandwidth
    assert point.flops_per_s == pytest.approx(caches * point.cache_intensity, rel=1e-9)
    assert point.intensity > point.cache_intensity and point.flops_per_s < dram * point.intensity
    assert _is_png(plot_roofline([("softmax_rows", mapping)], tmp_path / "roof.png"))


def test_bench_plot_draws_the_roofline_of_the_models(tmp_path, capsys):
    path = tmp_path / "roof.png"
    models = [str(ROOT / "models" / f"{m}.te") for m in ("axpy", "gemv")]
    assert main(["bench", *models, "--repeats", "1", "--plot", str(path)]) == 0
    assert _is_png(path)


@pytest.mark.parametrize(
    "argument, message",
    [
        ("picture.txt", r"must end in \.png, \.svg, \.pdf"),
        ("no/such/dir/picture.png", r"the directory .* does not exist"),
        ("", r"'': the file must end in"),
        ("a_dir.png", r"is a directory; name a file in it"),
    ],
)
def test_a_bad_plot_path_is_refused_before_the_solve(tmp_path, capsys, argument, message):
    (tmp_path / "a_dir.png").mkdir()
    given = str(tmp_path / argument) if argument else ""
    assert main(["map", str(ROOT / "models" / "axpy.te"), "--plot", given]) != 0
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "kernel0" not in capsys.readouterr().out  # refused before the solve: no report


def test_without_matplotlib_the_error_names_the_extra(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    mapping = polymap.optimize(polymap.load(ROOT / "models" / "axpy.te"))
    with pytest.raises(ArgumentError, match=r"pip install 'polymap\[plot\]'"):
        plot_mapping(mapping, tmp_path / "m.png")


def test_bench_kernels_draws_each_case_predicted_on_the_host(tmp_path, capsys):
    path, record = tmp_path / "cases.png", tmp_path / "cases.json"
    model = str(ROOT / "models" / "axpy.te")
    args = ["bench", "--kernels", model, "--host", "--json", "-o", str(record), "--plot", str(path), "-q"]
    assert main(args) == 0
    assert _is_png(path)
    assert "drew the roofline into" in capsys.readouterr().err
    (case,) = json.loads(record.read_text())["cases"]
    # axpy at N = 2^26: 2 flops per element; x and y read, z written, 4 bytes each
    n = 2**26
    assert case["flops"] == 2 * n
    assert case["model_dram_bytes"] == pytest.approx(12 * n)
    assert case["median_s"] is None  # no GPU ran it


def _result(case, predicted_s, samples_s, flops, dram_bytes, where="gpu"):
    from polymap.bench_kernels import Result

    return Result(case, {}, where, 0.0, predicted_s, samples_s, flops=flops, model_dram_bytes=dram_bytes)


def test_a_case_is_drawn_where_its_flops_bytes_and_times_put_it(tmp_path, monkeypatch):
    import polymap.plot as plot_module
    from polymap.plot import case_points, plot_bench_roofline
    from polymap.targets import get_target

    results = [
        _result("gpu case", 1e-3, (2e-3, 2e-3, 4e-3), 10**9, 10**8),
        _result("host case", 1e-3, (), 10**9, 4 * 10**9, where="host"),
        _result("copy", 1e-3, (1e-3,), 0, 10**9),  # no flops: not on a roofline
    ]
    gpu, host = case_points(results)
    # 10^9 flops over 10^8 bytes; predicted 10^9 / 1 ms; measured 10^9 / 2 ms (the median)
    assert (gpu.intensity, gpu.predicted, gpu.measured) == pytest.approx((10.0, 1e12, 5e11))
    assert (host.intensity, host.predicted, host.measured) == (0.25, pytest.approx(1e12), None)
    drawn = []
    real_save = plot_module._save

    def keep(fig, path):
        drawn.extend(tuple(xy) for ax in fig.axes for c in ax.collections for xy in c.get_offsets())
        real_save(fig, path)

    monkeypatch.setattr(plot_module, "_save", keep)
    assert _is_png(plot_bench_roofline(results, get_target("h100"), "a GPU", tmp_path / "r.png"))
    assert sorted(drawn) == sorted([(10.0, 1e12), (10.0, 5e11), (0.25, 1e12)])
