"""A grid axis y or z holds at most 65535 blocks: a kernel whose blocks on such an axis may
outnumber it (symbolic sizes) launches in parts of at most that many, each part's first
block passed to the kernel, which adds it to blockIdx (``KernelLaunch.parts``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import polymap
from polymap.reference import reference
from polymap.runtime.host import run_host
from polymap.runtime.launches import launches

SCALE = """
param M = 4096
param N = 64
in X: f32[M, N]
out Y: f32[M, N]
par M i { par N j { Y[i, j] = X[i, j] * 2 } }
"""

PARTED = "const int by = blockIdx.y + by_first;"  # y's blocks in parts

MATMUL = """
param M = 1024
param N = 1024
param K = 1024
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { C[i, j] = 0; seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""


def _parts_of(cuda, most: int):
    """The same program, its launcher launching y's and z's blocks in parts of ``most``
    instead of 65535, so that there are many parts at sizes the host runs quickly."""
    source = cuda.source.replace("+= 65535)", f"+= {most})").replace(
        "> 65535 ? 65535 :", f"> {most} ? {most} :"
    )
    assert source != cuda.source, "no parted axis in the launcher"
    return dataclasses.replace(cuda, source=source)


def test_rows_beyond_the_grid_limit_run_in_parts():
    """75000 blocks of rows on y: a launch of 65535, then one of the 9465 after them
    (before, run_host refused these sizes: more blocks than a grid dimension allows)."""
    program = polymap.parse(SCALE)
    kernel = polymap.compile(program)
    assert kernel.mapping.kernels[0].loops[0].block_axis is polymap.Axis.Y
    x = np.random.default_rng(0).random((300000, 64)).astype(np.float32)
    assert np.array_equal(kernel.run_host(X=x)["Y"], x * 2)
    # the Python launches (CuPy) part the same axis
    first, second = launches(kernel.cuda, {"M": 300000, "N": 64})
    assert (first.grid, first.first) == ((1, 65535, 1), {"y": 0})
    assert (second.grid, second.first) == ((1, 75000 - 65535, 1), {"y": 65535})


def test_blocks_beyond_an_int_are_refused():
    """The kernel reads its block's index as an int: a grid of 2^31 rows of blocks is
    refused by both launchers rather than wrapping the index negative."""
    text = """
param N
in X: f32[64, 32]
out A: f32[64, 32]
par 2 * N i { par 32 j { if i < 64 { A[i, j] = X[i, j] } } }
"""
    program = polymap.parse(text)
    mapping = polymap.optimize(program, pins={"i": {"block": "y", "threads": 1}})
    kernel = polymap.compile(program, mapping)
    parts = list(launches(kernel.cuda, {"N": 2**30 - 1}))  # 2^31 - 2 rows of blocks: they fit an int
    assert len(parts) == 32769 and parts[-1].first == {"y": 32768 * 65535}
    assert parts[-1].grid == (1, 2**31 - 2 - 32768 * 65535, 1)
    with pytest.raises(polymap.ArgumentError, match="exceeds the hardware's grid limits"):
        list(launches(kernel.cuda, {"N": 2**30}))
    x = np.ones((64, 32), np.float32)
    with pytest.raises(polymap.ArgumentError, match="more blocks than a grid dimension allows"):
        kernel.run_host(X=x, N=2**30)


def test_parts_of_staged_and_block_tree_kernels():
    """A staged, double-buffered GEMM (tiles in shared memory) and a block of warps per row
    (its combine through shared memory), launched in parts of 2 and 3 rows of blocks."""
    gemm = polymap.parse(MATMUL)
    kernel = polymap.compile(gemm)
    assert kernel.mapping.kernels[0].staging is not None
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (700, 96)).astype(np.float32)
    b = rng.integers(-3, 4, (96, 130)).astype(np.float32)
    out = run_host(_parts_of(kernel.cuda, 2), {"A": a, "B": b})
    assert np.array_equal(out["C"], a @ b)  # small integers: exact in any order

    softmax = polymap.load("models/masked_softmax.te")
    kernel = polymap.compile(softmax)
    assert kernel.mapping.kernels[0].lanes > 32
    x = np.random.default_rng(2).standard_normal((200, 200)).astype(np.float32)
    out = run_host(_parts_of(kernel.cuda, 3), {"X": x})
    np.testing.assert_allclose(out["Y"], reference(softmax, X=x)["Y"], rtol=1e-5, atol=1e-6)


def test_blocks_known_to_fit_are_not_parted():
    """Sizes bound (or a context that bounds the blocks): the grid is known to fit, and
    the kernel reads blockIdx alone, one launch."""
    kernel = polymap.compile(polymap.parse(SCALE).bind(M=4096, N=64))
    assert PARTED not in kernel.source and "const int by = blockIdx.y;" in kernel.source
    assert "_first" not in kernel.source


def test_a_kernel_never_launched_needs_no_parts():
    """A kernel inside a host loop of no iterations at any size: no parts, and it compiles
    (the launcher says it is never launched)."""
    text = """
param T
param N
in X: f32[N, 32]
out Y: f32[N, 32]
seq T t { seq t - t u { par N i { par 32 j { Y[i, j] = X[i, j] + f32(u) } } } }
"""
    kernel = polymap.compile(polymap.parse(text))
    assert "never launched" in kernel.source and PARTED not in kernel.source
    kernel = polymap.compile(polymap.parse(SCALE), context="M <= 100000")
    assert PARTED not in kernel.source
    kernel = polymap.compile(polymap.parse(SCALE), context="M <= 300000")
    assert PARTED in kernel.source
