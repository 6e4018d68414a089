"""A block's shared memory: the SM's split among the blocks it must hold, which the grid may
make fewer than its thread slots allow (``cost_model.resident_blocks``, ``shared_capacity``;
``ScipModel._shared_capacity``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import polymap
from polymap.mapping.cost_model import most_blocks, resident_blocks, shared_capacity
from polymap.targets import H100

MATMUL = Path(__file__).resolve().parent.parent / "models" / "matmul_1024.te"


@pytest.mark.parametrize(
    ("threads", "blocks", "resident", "capacity"),
    [
        # many blocks: the thread slots decide (2048 / 256 = 8): 233472 / 8 - 1024
        (256, 10**6, 8, 28160),
        # 64 threads: 2048 / 64 = 32 thread slots' worth and 32 block slots: 233472 / 32 - 1024
        (64, 10**6, 32, 6272),
        # 256 blocks on 132 SMs: two an SM, each may take 116736 - 1024, at most 48 KiB
        (64, 256, 2, 48 * 1024),
        # fewer blocks than SMs: one each
        (1024, 10, 1, 48 * 1024),
        # 32-thread blocks: the 32 block slots, not 64 by threads
        (32, 10**6, 32, 6272),
        # a grid just over 5 blocks an SM: 6 resident, 38912 - 1024, in 128-byte units
        (128, 5 * 132 + 1, 6, 37888),
    ],
)
def test_the_capacity_is_the_sm_split_among_the_blocks_it_holds(threads, blocks, resident, capacity):
    assert resident_blocks(H100, threads, blocks) == resident
    assert shared_capacity(H100, threads, blocks) == capacity


def _staged(sizes: dict[str, int]):
    """matmul with 64-thread blocks of 16 x 4 points pinned, its staging left to SCIP."""
    program = polymap.load(MATMUL).bind(**sizes)
    pins = {"i": {"threads": 2, "seq": 16}, "j": {"threads": 32, "seq": 4}}
    mapping = polymap.optimize(program, pins=pins)
    (cost,) = mapping.costs
    (kernel,) = mapping.kernels
    return kernel, cost


def test_a_grid_of_two_blocks_an_sm_gives_each_more_than_its_thread_share():
    """At 1024^3 the 256 blocks of 32 x 128 points sit two an SM: SCIP stages tiles of 32 k
    steps (43008 bytes, double-buffered), far over the 6272 bytes a 64-thread block's share
    of a full SM would be; at 8192^2 the 16384 blocks fill every slot, and the tiles must fit
    that share."""
    kernel, cost = _staged({"M": 1024, "N": 1024, "K": 1024})
    assert kernel.staging is not None and kernel.staging.tile == 32
    assert cost.shared_bytes > shared_capacity(H100, 64, 10**6)
    assert cost.shared_bytes <= shared_capacity(H100, 64, 256)
    kernel, cost = _staged({"M": 8192, "N": 8192, "K": 1024})
    assert cost.shared_bytes <= shared_capacity(H100, 64, 16384) == 6272


def test_the_most_blocks_of_a_span_round_each_loops_blocks_up():
    """33 x 12800 points in blocks of 2^10: 32 x 32 makes 2 x 400 = 800 blocks (64 x 16 too),
    where the points over the span count 412.5; powers of two split evenly."""
    assert most_blocks((33, 12800), (6, 14))[10] == 800
    assert most_blocks((1024, 1024), (10, 10))[12] == 256
    # a span beyond every loop's cap has no split
    assert 21 not in most_blocks((1024, 1024), (10, 10))


def test_a_ragged_grid_holds_the_blocks_it_launches():
    """A 33 x 12800 x 1024 GEMM: counted as points over the span, its grid gave each SM 4
    blocks and SCIP staged 35072 bytes a block, but the grid launched 800 blocks, 7 an SM,
    and shared memory held 6 (found by review). The capacity now counts the launched grid."""
    program = polymap.load(MATMUL).bind(M=33, N=12800, K=1024)
    mapping = polymap.optimize(program)
    (cost,) = mapping.costs
    (kernel,) = mapping.kernels
    assert cost.shared_bytes <= shared_capacity(H100, kernel.threads_per_block, cost.blocks)


def test_a_share_below_the_reserve_is_no_capacity_not_a_negative_one():
    """A target of 16 KiB an SM split 32 ways leaves 512 bytes a block, less than the 1 KiB
    reserve: the capacity is 0 (nothing staged), not -512 (which no mapping meets)."""
    small = dataclasses.replace(
        H100,
        shared_memory_per_sm=16 * 1024,
        shared_memory_per_block=16 * 1024,
        shared_memory_per_block_optin=16 * 1024,
    )
    assert shared_capacity(small, 32, 10**6) == 0
    assert shared_capacity(small, 1024, 10**6) == 7168  # 16384 / 2 - 1024
