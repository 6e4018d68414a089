"""Buffers that stay in L2 (``mapping/caching.py``): a buffer the kernel only reads, whose
footprint fits in half the L2, comes from DRAM once; its reads are the caches' traffic."""

from __future__ import annotations

import dataclasses

import pytest

import polymap
from polymap.mapping.caching import (
    ADJACENT,
    AGAIN,
    FIRST,
    cached_footprints,
    touched_before,
    window_footprints,
)
from polymap.mapping.space import kernels
from polymap.targets import H100, KIB

GEMV = "models/gemv.te"  # y[i] += A[i, j] * x[j] at M = N = 8192


def test_gemv_reads_x_from_l2_and_a_from_dram():
    """gemv's x (8192 floats, 32 KiB) stays in L2: DRAM moves A once, x once and y once (its
    write, a sector per row, lane 0's; y is an out buffer nothing wrote, so its register
    starts at 0 and y is never read), where it had moved x once per row."""
    mapping = polymap.optimize(polymap.load(GEMV))
    (cost,) = mapping.costs
    rows = {a.access: a for a in cost.accesses}
    assert cost.cached == (("x", 8192 * 4),)
    assert rows["x[j]"].cached and not rows["A[i, j]"].cached and not rows["y[i]"].cached
    assert [a.is_write for a in cost.accesses if a.access == "y[i]"] == [True]  # the write alone
    dram = 8192 * 8192 * 4 + 8192 * 4 + 8192 * 32
    assert cost.memory_s == pytest.approx(dram / H100.dram_bandwidth, rel=1e-12)
    every_byte = sum(a.bytes for a in cost.accesses)
    assert cost.cache_s == pytest.approx(every_byte / H100.cache_bandwidth, rel=1e-12)
    assert cost.bound_by == "memory"
    # SCIP optimized the cost the report prints
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6, rel=1e-6)
    report = str(mapping)
    assert "read x[j] (L2)" in report and "in L2: x (32768 bytes)" in report
    assert "caches " in report


def test_a_buffer_over_half_the_l2_is_read_from_dram_every_time():
    """On a target whose L2 holds 32 KiB, half of it is less than x: x is charged each read
    again, and the DRAM roof doubles."""
    small = dataclasses.replace(H100, name="H100 with a 32 KiB L2", l2_cache_bytes=32 * KIB)
    (cached,) = polymap.optimize(polymap.load(GEMV)).costs
    (charged,) = polymap.optimize(polymap.load(GEMV), target=small).costs
    assert charged.cached == () and charged.cache_s == 0
    assert not any(a.cached for a in charged.accesses)
    assert charged.memory_s == pytest.approx(2 * cached.memory_s, rel=0.01)


def test_a_buffer_the_kernel_writes_is_never_cached():
    """y is read and written (``y[i] += ...``), an in-place update: not a cached buffer,
    though it is small; a buffer read only is."""
    program = polymap.parse(
        """
param N = 1024
in  b: f32[N]
out y: f32[N]
par N i { y[i] = y[i] * 2 + b[i] }
"""
    )
    model = polymap.analyze(program.bind_defaults())
    (kernel,) = kernels(model.program)
    assert cached_footprints(kernel, model, H100) == (("b", 4096),)


def test_the_footprint_is_the_elements_read_not_the_buffer():
    """Only the elements the kernel reads count: a row of a large matrix is cached, and a
    read of the same elements twice counts them once."""
    program = polymap.parse(
        """
param M = 65536
param N = 1024
in  W: f32[M, N]
in  v: f32[N]
out y: f32[N]
par N j { y[j] = W[7, j] * v[j] + W[7, j] }
"""
    )
    model = polymap.analyze(program.bind_defaults())
    (kernel,) = kernels(model.program)
    assert dict(cached_footprints(kernel, model, H100)) == {"W": 4096, "v": 4096}


# -- what a band point touched before

SOFTMAX = "models/softmax_rows.te"  # 49152 rows of 512: three passes over a row


def _kinds(program) -> dict:
    model = polymap.analyze(program)
    (kernel,) = kernels(model.program)
    return touched_before(kernel, model)


def test_softmax_passes_re_read_the_row_their_band_point_read():
    """The max pass reads X's row first (X[i, 0] before it is one element of it); the
    exp pass reads it again and writes Y's row; its sum reads the Y just written; the
    scaling pass reads and rewrites Y's row: a write merged with the exp pass's."""
    mapping = polymap.optimize(polymap.load(SOFTMAX))
    assert _kinds(mapping.program) == {
        ("S0", "X[i, 0]", False): FIRST,
        ("S1", "X[i, j]", False): FIRST,
        ("S3", "Y[i, j]", True): FIRST,
        ("S3", "X[i, j]", False): AGAIN,
        ("S4", "Y[i, j]", False): ADJACENT,
        ("S5", "Y[i, j]", True): AGAIN,
        ("S5", "Y[i, j]", False): AGAIN,
    }


def test_a_write_after_a_read_is_not_merged():
    """Y's row is read (a sum) and then rewritten in place: the read is the row's first
    touch and the write must still reach DRAM, so it is no re-use; the second read is."""
    program = polymap.parse(
        """
param M = 4096
param N = 256
out Y: f32[M, N]
par M i {
  new s: f32
  s = 0
  seq N j { s += Y[i, j] }
  par N j { Y[i, j] = Y[i, j] / s }
}
"""
    )
    kinds = _kinds(polymap.optimize(program).program)
    assert kinds[("S1", "Y[i, j]", False)] == FIRST
    assert kinds[("S2", "Y[i, j]", True)] == FIRST
    assert kinds[("S2", "Y[i, j]", False)] == AGAIN


def test_the_re_reads_hit_only_where_the_band_points_in_flight_fit():
    """Softmax's rows are 2 KiB of X and 2 KiB of Y: a warp per row keeps 8448 rows in
    flight (34.6 MB, over half the L2), two warps 4224 (17.3 MB). With two warps DRAM moves
    X once and Y once; with one, every pass's row again (the read of the Y just written
    excepted); SCIP takes the two warps."""
    rows, row = 49152, 512 * 4
    dram = H100.dram_bandwidth
    first_x = rows * 32  # X[i, 0]: lane 0's, a sector per row
    two = polymap.optimize(polymap.load(SOFTMAX), pins={"i": {"lanes": 64}}).costs[0]
    assert two.memory_s == pytest.approx((first_x + 2 * rows * row) / dram, rel=1e-12)
    one = polymap.optimize(polymap.load(SOFTMAX), pins={"i": {"lanes": 32}}).costs[0]
    assert one.memory_s == pytest.approx((first_x + 5 * rows * row) / dram, rel=1e-12)
    assert one.reused == ("read Y[i, j] (S4)",)
    chosen = polymap.optimize(polymap.load(SOFTMAX))
    assert chosen.kernels[0].lanes >= 64 and chosen.costs[0].memory_s == two.memory_s
    assert chosen.solver[0].objective == pytest.approx(chosen.costs[0].objective_s * 1e6, rel=1e-6)
    assert "touched before by their band point: read X[i, j] (S3)" in str(chosen)


def test_one_element_read_twice_in_a_statement_is_one_load():
    """``(X[i, j] - m) * (X[i, j] - m)`` loads X[i, j] once: one access in the cost."""
    program = polymap.parse(
        "param N = 4096\nin X: f32[N]\nout Y: f32[N]\npar N i { Y[i] = (X[i] - 1) * (X[i] - 1) }"
    )
    (cost,) = polymap.optimize(program).costs
    assert [a.access for a in cost.accesses] == ["Y[i]", "X[i]"]


# ---------------------------------------------- windows: re-reads by neighbouring band points

STENCIL = """
param N = 8192
in  A: f32[N + 2, N + 2]
out B: f32[N, N]
par N i {
  par N j {
    B[i, j] = 0.2 * (A[i + 1, j + 1] + A[i, j + 1] + A[i + 2, j + 1] + A[i + 1, j] + A[i + 1, j + 2])
  }
}
"""


def _windows(text: str, **sizes):
    program = polymap.parse(text)
    program = program.bind(**sizes) if sizes else program.bind_defaults()
    model = polymap.analyze(program)
    return [window_footprints(k, model, H100) for k in kernels(program)]


def test_a_stencil_reads_its_grid_from_dram_once():
    """Five reads of A per point, each element read by five neighbouring points: DRAM moves
    A's box once and B once (a third of charging each read), and every read is the caches'."""
    mapping = polymap.optimize(polymap.parse(STENCIL).bind_defaults())
    (cost,) = mapping.costs
    a_bytes = 8194 * 8194 * 4
    assert cost.cached == (("A", a_bytes),) and cost.windowed == ("A",)
    rows = {a.access: a for a in cost.accesses}
    assert all(rows[text].cached for text in rows if text.startswith("A[")) and not rows["B[i, j]"].cached
    assert cost.memory_s == pytest.approx((a_bytes + 8192 * 8192 * 4) / H100.dram_bandwidth, rel=1e-12)
    assert cost.cache_s == pytest.approx(6 * 8192 * 8192 * 4 / H100.cache_bandwidth, rel=1e-12)
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6, rel=1e-6)
    report = str(mapping)
    assert "read A[i, j + 1] (L2)" in report
    assert f"held in L2 for neighbouring band points or accesses: A ({a_bytes} bytes)" in report
    assert "in L2:" not in report


def test_a_1d_convolution_holds_its_signal_over_the_filter_s_width():
    text = """
param N = 67108864
param K = 17
in  x: f32[N + K]
in  w: f32[K]
out y: f32[N]
par N i { seq K t { y[i] += x[i + t] * w[t] } }
"""
    # w fits in L2 whole (cached_footprints); x's window is 16 points of 2^26
    assert _windows(text) == [(("x", (67108864 + 16) * 4),)]


@pytest.mark.parametrize(
    "text",
    [
        # a GEMM's operands are read by a whole row or column of points: the window is the kernel
        """
param N = 4096
in  A: f32[N, N]
in  B: f32[N, N]
out C: f32[N, N]
par N i { par N j { seq N k { C[i, j] += A[i, k] * B[k, j] } } }
""",
        # each element read by one point only: nothing to hold
        """
param N = 8192
in  A: f32[N, N]
out B: f32[N, N]
par N i { par N j { B[i, j] = A[j, i] } }
""",
        # points half the rows apart share an element: the window is half the kernel
        """
param N = 8192
in  A: f32[2 * N, N]
out B: f32[N, N]
par N i { par N j { B[i, j] = A[i, j] + A[i + 4096, j] } }
""",
        # elements known only from the data
        """
param N = 8192
in  I: i32[N]
in  A: f32[N + 1, N]
out B: f32[N, N]
par N i { par N j { B[i, j] = A[I[i], j] + A[i + 1, j] } }
""",
    ],
    ids=["gemm", "transpose", "far-apart", "gather"],
)
def test_reads_of_no_bounded_window_are_charged_each_time(text):
    assert _windows(text) == [()]


def test_sibling_accesses_of_a_2x2_pool_move_its_input_once():
    """No two points of a stride-2 pool read one element, but each point's four accesses use
    the halves of the sectors the others leave: DRAM moves X's box once."""
    text = """
param H = 4096
param W = 4096
in  X: f32[2 * H, 2 * W]
out Y: f32[H, W]
par H i { par W j {
  Y[i, j] = max(max(X[2 * i, 2 * j], X[2 * i, 2 * j + 1]), max(X[2 * i + 1, 2 * j], X[2 * i + 1, 2 * j + 1]))
} }
"""
    assert _windows(text) == [(("X", 8192 * 8192 * 4),)]


def test_three_fields_of_a_32_byte_record_move_its_sector_once():
    """A particle record of 8 floats, of which each point reads 3: the three accesses are
    charged a sector each, but DRAM moves the record's one sector: X's box, once."""
    text = """
param N = 16777216
in  P: f32[8 * N]
out D: f32[N]
par N i { D[i] = sqrt(P[8 * i] * P[8 * i] + P[8 * i + 1] * P[8 * i + 1] + P[8 * i + 2] * P[8 * i + 2]) }
"""
    assert _windows(text) == [(("P", (8 * 16777216 - 5) * 4),)]


@pytest.mark.parametrize(
    "text",
    [
        # one access of stride 2: the other half of each sector is never read
        "param N = 8388608\nin X: f32[2 * N]\nout Y: f32[N]\npar N i { Y[i] = X[2 * i] }",
        # two accesses in one sector of a 64-element record: the box is 8 sectors a point
        "param N = 4194304\nin X: f32[64 * N]\nout Y: f32[N]\npar N i { Y[i] = X[64 * i] + X[64 * i + 1] }",
    ],
    ids=["one-access", "sparse"],
)
def test_sibling_accesses_whose_box_is_mostly_unread_are_charged_each_time(text):
    assert _windows(text) == [()]


def test_a_kernel_inside_host_loops_keeps_its_reads_charged():
    """jacobi1d's kernel runs once per time step, inside a host loop: no window is taken
    (its small buffers stay in L2 whole by cached_footprints)."""
    program = polymap.load("models/jacobi1d.te").bind_defaults()
    model = polymap.analyze(program)
    assert all(window_footprints(k, model, H100) == () for k in kernels(program))


def test_rows_neighbouring_points_walk_at_different_times_are_not_held():
    """Each of 2048 points walks row i and then row i + 1 of a 1 GiB buffer in long seq loops:
    its neighbour reads row i + 1 a whole walk earlier, while every point in flight streams
    its own rows through the L2, so A comes from DRAM twice (a review found it held)."""
    text = """
param M = 2048
param N = 131072
in  A: f32[M + 1, N]
out y: f32[M]
out z: f32[M]
par M i {
  seq N k { y[i] += A[i, k] }
  seq N k { z[i] += A[i + 1, k] }
}
"""
    assert _windows(text) == [()]
