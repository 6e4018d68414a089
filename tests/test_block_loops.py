"""A grid axis y or z holds at most 65535 blocks: a kernel whose blocks on such an axis may
outnumber it (symbolic sizes) loops over them (``codegen.cuda.block_loops``): the launch is
clamped to the limit, and each block runs its index, then every gridDim-th after it."""

from __future__ import annotations

import dataclasses

import numpy as np

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

LOOP = "const int by = (int)by_run;"  # the loop over y's blocks

MATMUL = """
param M = 1024
param N = 1024
param K = 1024
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { C[i, j] = 0; seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""


def _clamped(cuda, most: int):
    """The same program, its launcher clamping y and z to ``most`` blocks instead of 65535,
    so that every block runs several in turn at sizes the host runs quickly."""
    source = cuda.source.replace("65535 ? 65535", f"{most} ? {most}")
    assert source != cuda.source, "no looped axis in the launcher"
    return dataclasses.replace(cuda, source=source)


def test_rows_beyond_the_grid_limit_run_in_turn():
    """75000 blocks of rows on y: the launch takes 65535 and the kernel the rest in turn
    (before, run_host refused these sizes: more blocks than a grid dimension allows)."""
    program = polymap.parse(SCALE)
    kernel = polymap.compile(program)
    assert kernel.mapping.kernels[0].loops[0].block_axis is polymap.Axis.Y
    x = np.random.default_rng(0).random((300000, 64)).astype(np.float32)
    assert np.array_equal(kernel.run_host(X=x)["Y"], x * 2)
    # the Python launches (CuPy) clamp the same axis
    (launch,) = launches(kernel.cuda, {"M": 300000, "N": 64})
    assert launch.grid == (1, 65535, 1)


def test_blocks_in_turn_reuse_their_tiles_and_block_trees():
    """A staged, double-buffered GEMM (tiles in shared memory) and a block of warps per row
    (its combine through shared memory): each block runs many rows of blocks in turn."""
    gemm = polymap.parse(MATMUL)
    kernel = polymap.compile(gemm)
    assert kernel.mapping.kernels[0].staging is not None
    assert "the next block reuses the shared memory" in kernel.source
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (700, 96)).astype(np.float32)
    b = rng.integers(-3, 4, (96, 130)).astype(np.float32)
    out = run_host(_clamped(kernel.cuda, 2), {"A": a, "B": b})
    assert np.array_equal(out["C"], a @ b)  # small integers: exact in any order

    softmax = polymap.load("models/masked_softmax.te")
    kernel = polymap.compile(softmax)
    assert kernel.mapping.kernels[0].lanes > 32
    x = np.random.default_rng(2).standard_normal((200, 200)).astype(np.float32)
    out = run_host(_clamped(kernel.cuda, 3), {"X": x})
    np.testing.assert_allclose(out["Y"], reference(softmax, X=x)["Y"], rtol=1e-5, atol=1e-6)


def test_blocks_known_to_fit_are_not_looped():
    """Sizes bound (or a context that bounds the blocks): the grid is known to fit, and
    the kernel reads blockIdx as before."""
    kernel = polymap.compile(polymap.parse(SCALE).bind(M=4096, N=64))
    assert LOOP not in kernel.source and "const int by = blockIdx.y;" in kernel.source


def test_a_kernel_never_launched_needs_no_block_loop():
    """A kernel inside a host loop of no iterations at any size: no loop, and it compiles
    (the launcher says it is never launched)."""
    text = """
param T
param N
in X: f32[N, 32]
out Y: f32[N, 32]
seq T t { seq t - t u { par N i { par 32 j { Y[i, j] = X[i, j] + f32(u) } } } }
"""
    kernel = polymap.compile(polymap.parse(text))
    assert "never launched" in kernel.source and LOOP not in kernel.source
    kernel = polymap.compile(polymap.parse(SCALE), context="M <= 100000")
    assert LOOP not in kernel.source
    kernel = polymap.compile(polymap.parse(SCALE), context="M <= 300000")
    assert LOOP in kernel.source
