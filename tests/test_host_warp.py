"""CUDA's warp intrinsics in the host emulation (``cuda_templates/polymap_host.h``):
``__shfl_sync``, ``__shfl_up_sync``, ``__shfl_down_sync``, ``__shfl_xor_sync`` and
``__syncwarp`` on the fibers of a launch with sync = true, with CUDA's lane and segment rules.

Each kernel is written by hand, compiled by :func:`polymap.runtime.host.build_library` (the
project's compiler and flags, the host header included) and checked against values NumPy
computes from the inputs here: the rules of CUDA's programming guide and PTX's shfl.sync,
not the header's code.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

import numpy as np
import pytest

from polymap.runtime.host import build_library

WARP = 32
FULL = "0xffffffffu"


class Kernel:
    """A kernel ``warp_kernel(in, out, a, b)`` whose thread i reads ``v = in[i]``, runs
    ``body`` (which sets ``r``, of the result type) and writes ``out[i] = r``."""

    def __init__(self, body, *, t="float", r=None, block=(64, 1, 1), grid=1, name="warp"):
        r = r or t
        self.block, self.grid = block, grid
        bx, by, bz = block
        source = f"""
typedef {t} T;
typedef {r} R;
__global__ void warp_kernel(const T* in, R* out, int a, int b) {{
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int lane = t % 32;
  const long long i = (long long)blockIdx.x * (blockDim.x * blockDim.y * blockDim.z) + t;
  const T v = in[i];
  R r = v;
{body}
  out[i] = r;
}}
extern "C" int run(const T* in, R* out, int a, int b) {{
  POLYMAP_LAUNCH(warp_kernel, dim3({grid}), dim3({bx}, {by}, {bz}), true, in, out, a, b);
  return 0;
}}
"""
        self.library = build_library(source, name)
        self.run_function = ctypes.CDLL(str(self.library)).run
        self.out_dtype = DTYPES[r]

    @property
    def size(self) -> int:
        return self.grid * int(np.prod(self.block))

    def __call__(self, values: np.ndarray, a: int = 0, b: int = 0) -> np.ndarray:
        assert values.size == self.size
        values = np.ascontiguousarray(values)
        out = np.zeros(self.size, self.out_dtype)
        status = self.run_function(
            ctypes.c_void_p(values.ctypes.data),
            ctypes.c_void_p(out.ctypes.data),
            ctypes.c_int(a),
            ctypes.c_int(b),
        )
        assert status == 0
        return out


DTYPES = {
    "float": np.float32,
    "double": np.float64,
    "int": np.int32,
    "unsigned": np.uint32,
    "long": np.int64,
    "unsigned long": np.uint64,
    "long long": np.int64,
    "unsigned long long": np.uint64,
    "short": np.int16,
    "unsigned short": np.uint16,
    "signed char": np.int8,
    "unsigned char": np.uint8,
    "bool": np.bool_,
}
NUMERIC = ["float", "int", "double"]


def small_integers(size: int, dtype, seed: int = 0) -> np.ndarray:
    """Integers small enough that every sum of them is exact in f32, in any order."""
    return np.random.default_rng(seed).integers(-1000, 1000, size).astype(dtype)


BUTTERFLY = f"  for (int m = 16; m > 0; m /= 2) r += __shfl_xor_sync({FULL}, r, m);"


@pytest.mark.parametrize("t", NUMERIC)
def test_a_full_warp_xor_butterfly_gives_every_lane_the_warp_total(t):
    kernel = Kernel(BUTTERFLY, t=t, block=(64, 1, 1), grid=3, name="warp_butterfly")
    values = small_integers(kernel.size, DTYPES[t])
    expected = np.repeat(values.reshape(-1, WARP).sum(axis=1, dtype=np.float64), WARP)
    np.testing.assert_array_equal(kernel(values), expected.astype(DTYPES[t]))


@pytest.mark.parametrize("t", NUMERIC)
def test_width_8_butterflies_sum_each_8_lane_group(t):
    body = f"  for (int m = 4; m > 0; m /= 2) r += __shfl_xor_sync({FULL}, r, m, 8);"
    kernel = Kernel(body, t=t, block=(96, 1, 1), grid=2, name="warp_butterfly8")
    values = small_integers(kernel.size, DTYPES[t], seed=1)
    expected = np.repeat(values.reshape(-1, 8).sum(axis=1, dtype=np.float64), 8)
    np.testing.assert_array_equal(kernel(values), expected.astype(DTYPES[t]))


def test_shfl_sync_reads_its_source_lane_modulo_width_within_each_segment():
    kernel = Kernel(
        f"  r = __shfl_sync({FULL}, v, a, b);", t="int", block=(64, 1, 1), grid=2, name="warp_idx"
    )
    values = np.arange(kernel.size, dtype=np.int32) * 7 + 3
    index = np.arange(kernel.size)
    for width in (32, 16, 8, 4, 2, 1):
        for source in (0, 5, width + 3, -1):  # -1: the segment's last lane
            start = index - index % width  # the segment's first thread (segments never span warps)
            expected = values[start + source % width]
            np.testing.assert_array_equal(
                kernel(values, source, width), expected, err_msg=f"{width=} {source=}"
            )


def test_shfl_sync_broadcasts_lane_0_of_each_segment():
    kernel = Kernel(f"  r = __shfl_sync({FULL}, v, 0, a);", t="float", block=(128, 1, 1), name="warp_bcast")
    values = np.random.default_rng(2).standard_normal(kernel.size).astype(np.float32)
    for width in (32, 8):
        expected = np.repeat(values[::width], width)
        np.testing.assert_array_equal(kernel(values, width), expected, err_msg=f"{width=}")


def test_shfl_down_edge_lanes_keep_their_own_value():
    kernel = Kernel(f"  r = __shfl_down_sync({FULL}, v, a, b);", t="double", grid=2, name="warp_down")
    values = np.random.default_rng(3).standard_normal(kernel.size)
    index = np.arange(kernel.size)
    for width in (32, 16, 8):
        for delta in (1, 3, width - 1):
            inside = index % width + delta < width
            expected = np.where(inside, values[np.minimum(index + delta, kernel.size - 1)], values)
            np.testing.assert_array_equal(
                kernel(values, delta, width), expected, err_msg=f"{width=} {delta=}"
            )
            assert not inside.all()  # some lanes keep their own value


def test_shfl_up_first_lanes_keep_their_own_value():
    kernel = Kernel(f"  r = __shfl_up_sync({FULL}, v, a, b);", t="int", grid=2, name="warp_up")
    values = np.arange(kernel.size, dtype=np.int32) * 5 - 11
    index = np.arange(kernel.size)
    for width in (32, 8):
        for delta in (1, 3):
            inside = index % width >= delta
            expected = np.where(inside, values[np.maximum(index - delta, 0)], values)
            np.testing.assert_array_equal(
                kernel(values, delta, width), expected, err_msg=f"{width=} {delta=}"
            )


def test_shfl_xor_reads_earlier_segments_but_not_later_ones():
    """CUDA: with width < 32 a group may read lanes of earlier groups, but where the lane
    mask leads to a later group the caller's own value is returned (PTX: j <= maxLane)."""
    kernel = Kernel(f"  r = __shfl_xor_sync({FULL}, v, a, b);", t="int", grid=2, name="warp_xor")
    values = np.arange(kernel.size, dtype=np.int32) + 100
    index = np.arange(kernel.size)
    for width, lane_mask in ((8, 8), (8, 24), (16, 16), (8, 3), (32, 31)):
        lane = index % WARP
        partner = lane ^ lane_mask
        last_of_segment = lane - lane % width + width - 1
        expected = np.where(partner <= last_of_segment, values[index - lane + partner], values)
        np.testing.assert_array_equal(
            kernel(values, lane_mask, width), expected, err_msg=f"{width=} {lane_mask=}"
        )
        if lane_mask >= width:
            assert (expected == values).any() and (expected != values).any()


def test_a_guard_may_skip_whole_8_lane_groups():
    """Only some 8-lane groups exchange, each with the mask of its own lanes; the others
    never call the shuffle, and their threads run on meanwhile."""
    body = """
  if ((t / 8) % 3 != 1) {
    const unsigned group = 0xffu << (8 * (lane / 8));
    for (int m = 4; m > 0; m /= 2) r += __shfl_xor_sync(group, r, m, 8);
  }
"""
    kernel = Kernel(body, t="int", block=(64, 1, 1), grid=2, name="warp_guard")
    values = small_integers(kernel.size, np.int32, seed=4)
    group = np.arange(kernel.size) % 64 // 8
    sums = np.repeat(values.reshape(-1, 8).sum(axis=1), 8)
    expected = np.where(group % 3 != 1, sums, values)
    np.testing.assert_array_equal(kernel(values), expected)


def test_one_8_lane_group_of_a_warp_swaps_neighbours_alone():
    body = "  if (lane / 8 == 1) r = __shfl_xor_sync(0xffu << 8, v, 1, 8);"
    kernel = Kernel(body, t="float", block=(64, 1, 1), name="warp_one_group")
    index = np.arange(kernel.size)
    expected = np.where(index % WARP // 8 == 1, index ^ 1, index)
    np.testing.assert_array_equal(kernel(index.astype(np.float32)), expected.astype(np.float32))


def test_a_barrier_holds_every_warp_until_the_exchanges_end():
    """Warp 0 reduces (10 rounds of exchange) and stores its total in shared memory while
    warp 1 goes straight to the barrier: warp 1 must not pass it before warp 0 gets there."""
    body = f"""
  __shared__ T total[32];
  if (t < 32) total[t] = 0;
  __syncthreads();
  if (t < 32) {{
{BUTTERFLY}
    total[lane] = r;
  }}
  __syncthreads();
  if (t >= 32) r = total[lane];
"""
    kernel = Kernel(body, t="int", block=(64, 1, 1), grid=4, name="warp_barrier")
    values = small_integers(kernel.size, np.int32, seed=5)
    expected = np.repeat(values.reshape(-1, 64)[:, :32].sum(axis=1), 64)
    np.testing.assert_array_equal(kernel(values), expected)


def test_syncwarp_orders_shared_memory_within_a_warp():
    body = f"""
  __shared__ T seen[64];
  seen[t] = v;
  __syncwarp({FULL});
  r = seen[t - lane + (lane + 1) % 32];
"""
    kernel = Kernel(body, t="int", block=(64, 1, 1), grid=2, name="warp_syncwarp")
    values = np.arange(kernel.size, dtype=np.int32) * 3 + 1
    index = np.arange(kernel.size)
    np.testing.assert_array_equal(kernel(values), values[index - index % WARP + (index + 1) % WARP])


def test_the_lane_is_the_linear_thread_id_modulo_32():
    """A block of 8 x 4 x 2 threads: the warps are the runs of 32 linear ids, whatever the
    block's shape (threadIdx.x alone would give lanes 0 .. 7)."""
    kernel = Kernel(f"  r = __shfl_sync({FULL}, v, 31);", t="int", block=(8, 4, 2), grid=2, name="warp_shape")
    values = np.arange(kernel.size, dtype=np.int32)
    np.testing.assert_array_equal(kernel(values), values - values % WARP + 31)


def test_a_partial_last_warp_exchanges_within_its_lanes():
    body = f"  for (int m = 4; m > 0; m /= 2) r += __shfl_xor_sync({FULL}, r, m, 8);"
    kernel = Kernel(body, t="int", block=(40, 1, 1), grid=3, name="warp_partial")
    values = small_integers(kernel.size, np.int32, seed=6)
    np.testing.assert_array_equal(kernel(values), np.repeat(values.reshape(-1, 8).sum(axis=1), 8))


def test_a_lane_outside_the_mask_gives_an_undefined_value_with_every_bit_set():
    """CUDA leaves the value read from a lane outside the mask undefined: the emulation gives
    all bits set (-1, NaN), so that a kernel that uses one fails its check."""
    body = "  if (lane < 8) r = __shfl_down_sync(0xffu, v, 4);"
    kernel = Kernel(body, t="int", block=(32, 1, 1), name="warp_outside")
    values = np.arange(32, dtype=np.int32) + 10
    expected = values.copy()
    expected[:4] = values[4:8]
    expected[4:8] = -1
    np.testing.assert_array_equal(kernel(values), expected)


def test_blocks_spread_over_several_os_threads_keep_their_own_exchanges():
    source = f"""
__global__ void warp_kernel(const int* in, int* out, unsigned long long* os_thread) {{
  const int t = threadIdx.x;
  const long long i = (long long)blockIdx.x * blockDim.x + t;
  int r = in[i];
{BUTTERFLY}
  out[i] = r;
  if (t == 0) os_thread[blockIdx.x] = std::hash<std::thread::id>{{}}(std::this_thread::get_id());
}}
extern "C" int run(const int* in, int* out, unsigned long long* os_thread) {{
  POLYMAP_LAUNCH(warp_kernel, dim3(1024), dim3(256), true, in, out, os_thread);
  return 0;
}}
extern "C" unsigned cores() {{ return std::thread::hardware_concurrency(); }}
"""
    library = ctypes.CDLL(str(build_library(source, "warp_os_threads")))
    library.cores.restype = ctypes.c_uint
    values = small_integers(1024 * 256, np.int32, seed=7)
    out = np.zeros_like(values)
    os_thread = np.zeros(1024, np.uint64)  # long enough (~0.2 s) for every worker to start
    assert library.run(*(ctypes.c_void_p(a.ctypes.data) for a in (values, out, os_thread))) == 0
    np.testing.assert_array_equal(out, np.repeat(values.reshape(-1, WARP).sum(axis=1), WARP))
    if library.cores() > 1:
        assert len(set(os_thread.tolist())) > 1  # the launch did spread the blocks


# CUDA's overloads: int, unsigned, long, unsigned long, long long, unsigned long long, float,
# double; smaller integers and bool reach the int one by promotion
TYPES = [
    ("float", "float"),
    ("double", "double"),
    ("int", "int"),
    ("unsigned", "unsigned"),
    ("long", "long"),
    ("unsigned long", "unsigned long"),
    ("long long", "long long"),
    ("unsigned long long", "unsigned long long"),
    ("short", "int"),
    ("unsigned short", "int"),
    ("signed char", "int"),
    ("unsigned char", "int"),
    ("bool", "int"),
]


def every_bit(dtype, size: int) -> np.ndarray:
    rng = np.random.default_rng(8)
    if dtype == np.bool_:
        return rng.integers(0, 2, size).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return (rng.standard_normal(size) * 1e6).astype(dtype)  # f64 digits past f32's
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)


@pytest.mark.parametrize(("t", "r"), TYPES)
def test_every_type_cuda_shuffles_comes_back_whole_with_cuda_s_result_type(t, r):
    body = f"""
  static_assert(std::is_same_v<decltype(__shfl_sync(0u, T(), 0)), R>);
  static_assert(std::is_same_v<decltype(__shfl_up_sync(0u, T(), 0u)), R>);
  static_assert(std::is_same_v<decltype(__shfl_down_sync(0u, T(), 0u)), R>);
  static_assert(std::is_same_v<decltype(__shfl_xor_sync(0u, T(), 0)), R>);
  r = __shfl_sync({FULL}, v, lane + 1);
"""
    kernel = Kernel(body, t=t, r=r, block=(64, 1, 1), grid=2, name="warp_types")
    values = every_bit(DTYPES[t], kernel.size)
    index = np.arange(kernel.size)
    expected = values[index - index % WARP + (index + 1) % WARP].astype(DTYPES[r])
    out = kernel(values)
    np.testing.assert_array_equal(out, expected)
    if DTYPES[t] in (np.int64, np.uint64):
        assert (np.abs(out.astype(np.float64)) > 2.0**32).any()  # the high words moved too


def test_the_portable_fiber_switch_exchanges_too(monkeypatch):
    """Off x86-64 the fibers switch with ucontext (POLYMAP_HOST_UCONTEXT forces it here)."""
    import polymap.runtime.host as host

    monkeypatch.setattr(host, "FLAGS", (*host.FLAGS, "-DPOLYMAP_HOST_UCONTEXT"))
    kernel = Kernel(BUTTERFLY, t="double", block=(64, 1, 1), grid=3, name="warp_ucontext")
    values = small_integers(kernel.size, np.float64, seed=9)
    np.testing.assert_array_equal(kernel(values), np.repeat(values.reshape(-1, WARP).sum(axis=1), WARP))


def run_aborting(body: str, *, sync: bool, name: str) -> subprocess.CompletedProcess:
    """Run a kernel of one block of 64 threads in a process of its own, which it may abort
    (one block: the first thread to stop it is then thread 0)."""
    source = f"""
__global__ void warp_kernel(int* out) {{
  const int lane = threadIdx.x % 32;
  int r = threadIdx.x;
{body}
  out[threadIdx.x] = r;
}}
extern "C" int run() {{
  static int out[64];
  POLYMAP_LAUNCH(warp_kernel, dim3(1), dim3(64), {"true" if sync else "false"}, out);
  return out[1];
}}
"""
    library = build_library(source, name)
    script = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).run())"
    return subprocess.run(
        [sys.executable, "-c", script, str(library)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("intrinsic", "call", "thread_1"),
    [
        ("__shfl_sync", f"r = __shfl_sync({FULL}, r, 0);", 0),
        ("__shfl_up_sync", f"r = __shfl_up_sync({FULL}, r, 1u);", 0),
        ("__shfl_down_sync", f"r = __shfl_down_sync({FULL}, r, 1u);", 2),
        ("__shfl_xor_sync", f"r = __shfl_xor_sync({FULL}, r, 1);", 0),
        ("__syncwarp", "__syncwarp();", 1),
    ],
)
def test_a_warp_intrinsic_outside_a_fiber_launch_aborts_with_the_reason(intrinsic, call, thread_1):
    done = run_aborting(call, sync=False, name="warp_no_fibers")
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stdout, done.stderr)
    assert f"polymap host emulation: {intrinsic} in block (0, 0, 0), thread (0, 0, 0)" in done.stderr
    assert "launched with sync = false" in done.stderr
    fine = run_aborting(call, sync=True, name="warp_fibers")  # the same kernel, launched with fibers
    assert (fine.returncode, fine.stdout.strip()) == (0, str(thread_1)), fine.stderr


def test_a_lane_named_in_the_mask_that_skips_the_exchange_aborts():
    """Lanes 8 .. 15 are named but wait at the barrier instead (on a GPU: a hang)."""
    body = "if (lane < 8) r = __shfl_xor_sync(0xffffu, r, 8);\n  __syncthreads();"
    done = run_aborting(body, sync=True, name="warp_missing")
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stderr)
    assert "__shfl_xor_sync in block (0, 0, 0), thread (0, 0, 0)" in done.stderr
    assert "a lane named in the mask did not take part in the same exchange" in done.stderr


def test_a_lane_outside_its_own_mask_aborts():
    done = run_aborting("__syncwarp(0xfffffffeu);", sync=True, name="warp_not_in_mask")
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stderr)
    assert (
        "__syncwarp in block (0, 0, 0), thread (0, 0, 0): the calling lane is not in the mask" in done.stderr
    )
