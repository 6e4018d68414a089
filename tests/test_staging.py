"""Shared-memory staging: the decision (SCIP), the proof (isl: coverage and barriers) and the
code (copies, __syncthreads, per-point accumulators), each checked against the reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import polymap.prove as verify_module
from polymap import compile, load, optimize, parse, reference, verify
from polymap.errors import ArgumentError, InfeasibleMappingError, VerificationError
from polymap.mapping.cost_model import REGISTERS_PER_BUFFER, REGISTERS_PER_STAGED, REGISTERS_THREAD
from polymap.mapping.space import KernelMapping, Staging
from polymap.runtime.arguments import random_inputs
from polymap.targets import H100, KIB

MODELS = Path(__file__).resolve().parents[1] / "models"

MATMUL = """
param M
param N
param K
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""


def _check_on_host(kernel, seed=3):
    arrays = random_inputs(kernel.program, kernel.program.sizes, seed=seed)
    got = kernel.run_host(**arrays)
    want = reference(kernel.program, **arrays)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_matmul_stages_both_operands_over_the_reduction_loop():
    mapping = optimize(parse(MATMUL, name="mm").bind(M=256, N=256, K=64))
    staging = mapping.kernels[0].staging
    assert staging.loop == "k" and set(staging.buffers) == {"A", "B"} and staging.tile >= 8
    rows = {a.access: a for a in mapping.costs[0].accesses}
    assert rows["A[i, k]"].from_shared and rows["B[k, j]"].from_shared
    assert 0 < mapping.costs[0].shared_bytes <= mapping.target.shared_memory_per_block
    assert any("barrier separates every copy into A's tile" in p for p in mapping.proofs)
    assert any("every read of B by" in p for p in mapping.proofs)


def test_staged_reads_and_tile_stores_are_charged_to_shared_memory():
    """The shared-memory roof, counted by hand for a pinned 32 x 32 staged matmul at 256^2 x 32:
    the k loop reads one element of each tile per FMA (2 x 256 * 256 * 32 / 32 warp reads, a
    wavefront each) and the copies store each block's two 32 x 32 tiles once (64 blocks x 2 x
    1024 elements / 32 per warp store)."""
    program = parse(MATMUL, name="mm").bind(M=256, N=256, K=32)
    pins = {
        "i": {"thread": "y", "block": "y", "threads": 32, "seq": 1},
        "j": {"thread": "x", "block": "x", "threads": 32, "seq": 1},
        "k": {"tile": 32, "stage": ["A", "B"]},
    }
    mapping = optimize(program, pins=pins)
    cost, target = mapping.costs[0], mapping.target
    wavefronts = 2 * 256 * 256 * 32 // 32 + 64 * 2 * 1024 // 32
    assert cost.shared_s == pytest.approx(wavefronts / (target.sm_count * target.clock_hz))
    assert cost.time_s == pytest.approx(
        max(cost.memory_s, cost.compute_s, cost.shared_s, cost.issue_s) / cost.fill
    )
    assert cost.shared_s > cost.memory_s  # the roof that binds
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6, rel=1e-5)
    assert f"shared memory {cost.shared_s * 1e6:.4g} us" in str(mapping)
    unstaged = optimize(program, staging=False).costs[0]
    assert unstaged.shared_s == 0.0


def test_staging_can_be_turned_off_and_pinned():
    program = parse(MATMUL, name="mm").bind(M=128, N=128, K=64)
    assert optimize(program, staging=False).kernels[0].staging is None
    assert optimize(program, pins={"k": {"stage": []}}).kernels[0].staging is None
    only_b = optimize(program, pins={"k": {"stage": ["B"], "tile": 16}}).kernels[0].staging
    assert only_b == Staging("k", 16, ("B",), copy_vectors=(("B", 4),), slots=only_b.slots)


def test_tile_and_stage_pins_apply_to_seq_loops_only():
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=16)
    with pytest.raises(
        ArgumentError, match="'tile', 'stage', 'transpose', 'copy' and 'slots' apply to a seq loop"
    ):
        optimize(program, pins={"j": {"tile": 8}})
    with pytest.raises(
        ArgumentError, match="only its 'tile', 'stage', 'transpose', 'copy' and 'slots' can be pinned"
    ):
        optimize(program, pins={"k": "threadIdx.x"})
    with pytest.raises(ArgumentError, match="stage must be a buffer name"):
        optimize(program, pins={"k": {"stage": 3}})


@pytest.mark.parametrize(
    "pins",
    [
        {
            "i": {"threads": 8, "seq": 2},
            "j": {"threads": 32, "seq": 2, "distribution": "cyclic"},
            "k": {"tile": 8, "stage": ["A", "B"]},
        },
        {
            "i": {"threads": 4, "seq": 4, "distribution": "blocked"},
            "j": {"threads": 32, "seq": 1},
            "k": {"tile": 16, "stage": ["A", "B"]},
        },
        {
            "i": {"threads": 1, "seq": 1},
            "j": {"threads": 64, "seq": 2, "distribution": "blocked"},
            "k": {"tile": 64, "stage": ["A"]},
        },
    ],
)
def test_staged_matmul_with_points_per_thread_equals_the_reference(pins):
    # non-divisible sizes: partial blocks, a partial last tile, guarded copies
    kernel = compile(parse(MATMUL, name="mm").bind(M=37, N=70, K=45), pins=pins)
    assert kernel.mapping.kernels[0].staging is not None
    assert "__syncthreads();" in kernel.source and "__shared__ __align__(16) float" in kernel.source
    _check_on_host(kernel)
    kernel.ptx()  # NVRTC compiles it for sm_90


def test_staged_transpose_equals_the_reference_at_odd_sizes():
    # at 45 x 33, A stays in an H100's L2 and its reads need no tile: on a target whose L2
    # holds none of it, SCIP stages it as at large sizes
    no_l2 = dataclasses.replace(H100, name="H100 without an L2 to speak of", l2_cache_bytes=KIB)
    kernel = compile(load(MODELS / "transpose.te").bind(M=45, N=33), target=no_l2)
    assert kernel.mapping.kernels[0].staging.buffers == ("A",)
    _check_on_host(kernel)


def test_symbolic_sizes_stage_too():
    kernel = compile(parse(MATMUL, name="mm"), context="M >= 1 and N >= 1 and K >= 1")
    assert kernel.mapping.kernels[0].staging is not None
    arrays = random_inputs(kernel.program, {"M": 19, "N": 40, "K": 9}, seed=1)
    got = kernel.run_host(**arrays)
    np.testing.assert_allclose(
        got["C"], reference(kernel.program.bind(M=19, N=40, K=9), **arrays)["C"], rtol=1e-5, atol=1e-5
    )


def _without(label):
    real = verify_module.shared_plan

    def plan(*args):
        found = real(*args)
        if found is None:
            return None
        return dataclasses.replace(
            found, barriers=tuple(b for b in found.barriers if not b.name.startswith(label))
        )

    return plan


@pytest.mark.parametrize("label", ["Sync_copied", "Sync_next"])
def test_verify_finds_a_missing_barrier(monkeypatch, label):
    # several tiles: the barrier after the copies (read after write) and the one before the
    # next tile's copies (write after read) are each needed
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=64)
    mapping = optimize(program, pins={"k": {"tile": 8, "slots": 1, "stage": ["A", "B"]}})
    monkeypatch.setattr(verify_module, "shared_plan", _without(label))
    with pytest.raises(VerificationError, match="a barrier is missing"):
        verify(mapping.program, mapping.kernels)


def test_verify_finds_a_read_no_thread_copied(monkeypatch):
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=64)
    mapping = optimize(program, pins={"k": {"tile": 8, "slots": 1, "stage": ["A", "B"]}})
    real = verify_module.shared_plan

    def plan(*args):
        found = real(*args)
        first = found.copies[0]
        # the copy of the first staged buffer skips the tile's last element of each row
        narrowed = first.relation.intersect_range(first.domain.remove_redundancies())
        last = narrowed.dim(verify_module.isl.dim_type.out) - 1
        narrowed = narrowed.intersect_range(
            narrowed.range().upper_bound_val(
                verify_module.isl.dim_type.set,
                last,
                verify_module.isl.Val.int_from_si(narrowed.get_ctx(), first.buffer.widths[-1] - 2),
            )
        )
        return dataclasses.replace(
            found, copies=(dataclasses.replace(first, relation=narrowed),) + found.copies[1:]
        )

    monkeypatch.setattr(verify_module, "shared_plan", plan)
    with pytest.raises(VerificationError, match="no thread copies the element it needs"):
        verify(mapping.program, mapping.kernels)


def test_a_staging_that_names_no_candidate_is_rejected():
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=16)
    mapping = optimize(program)
    km = mapping.kernels[0]
    broken = KernelMapping(km.kernel, km.loops, Staging("k", 8, ("C",)))
    with pytest.raises(VerificationError, match="cannot stage 'C'"):
        verify(mapping.program, (broken,))
    broken = KernelMapping(km.kernel, km.loops, Staging("q", 8, ("A",)))
    with pytest.raises(VerificationError, match="no seq loop 'q'"):
        verify(mapping.program, (broken,))


def test_registers_of_per_point_accumulators_are_estimated_and_limited():
    program = parse(MATMUL, name="mm").bind(M=256, N=256, K=64)
    pins = {
        "i": {"threads": 8, "seq": 2, "interleave": False},
        "j": {"threads": 32, "seq": 2},
        "k": {"tile": 8, "stage": ["A", "B"]},
    }
    mapping = optimize(program, pins=pins)
    # the thread's own (A, B and C's addresses) and the two tiles' copies, whatever the points
    base = REGISTERS_THREAD + 3 * REGISTERS_PER_BUFFER + 2 * REGISTERS_PER_STAGED
    assert mapping.costs[0].registers == base + 1 + 3  # C_acc once per point: 4 points
    assert f"about {base + 4} registers per thread" in str(mapping)
    # interleaved, a step also holds two values of A (one per point of i) and two of B
    together = optimize(program, pins={**pins, "i": {**pins["i"], "interleave": True}})
    assert together.costs[0].registers == base + 1 + 3 + 1 + 1
    # 1024 threads with 64 accumulators each need 1024 x 96 registers, over the block's 65536
    greedy = {
        "i": {"threads": 32, "seq": 8},
        "j": {"threads": 32, "seq": 8},
        "k": {"tile": 8, "stage": ["A"]},
    }
    with pytest.raises(InfeasibleMappingError, match="conflict"):
        optimize(parse(MATMUL, name="mm").bind(M=512, N=512, K=64), pins=greedy)
    # with 16 points per thread (C_acc 16 times, A's copy) the same block fits
    fits = {
        "i": {"threads": 32, "seq": 4, "interleave": False},
        "j": {"threads": 32, "seq": 4},
        "k": {"tile": 8, "stage": ["A"]},
    }
    one_tile = REGISTERS_THREAD + 3 * REGISTERS_PER_BUFFER + REGISTERS_PER_STAGED
    mapped = optimize(parse(MATMUL, name="mm").bind(M=512, N=512, K=64), pins=fits)
    assert mapped.costs[0].registers == one_tile + 16 and 1024 * (one_tile + 16) <= 65536


def test_the_command_line_pins_tiles_and_staging(tmp_path, capsys):
    from polymap.cli import main

    path = tmp_path / "mm.te"
    path.write_text(MATMUL)
    assert (
        main(
            [
                "map",
                str(path),
                "--size",
                "M=64",
                "--size",
                "N=64",
                "--size",
                "K=32",
                "--pin",
                "k.tile=16",
                "--pin",
                "k.stage=B",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "B staged in shared memory over loop 'k' in tiles of 16" in out
    assert (
        main(
            ["map", str(path), "--size", "M=64", "--size", "N=64", "--size", "K=32", "--pin", "k.stage=none"]
        )
        == 0
    )
    assert "staged in shared memory" not in capsys.readouterr().out


def test_the_host_emulation_shows_a_missing_barrier_as_a_wrong_result():
    """The host runs a block's threads one after another between barriers (fibers), so the
    same source without its barriers reads tiles before the later threads copied them: the
    emulation is faithful to __syncthreads(), not only to the arithmetic."""
    from dataclasses import replace

    from polymap.runtime.host import run_host

    kernel = compile(
        parse(MATMUL, name="mm").bind(M=64, N=64, K=32), pins={"k": {"tile": 16, "stage": ["A", "B"]}}
    )
    assert kernel.mapping.kernels[0].staging is not None
    arrays = random_inputs(kernel.program, kernel.program.sizes, seed=5)
    want = reference(kernel.program, **arrays)["C"]
    np.testing.assert_allclose(run_host(kernel.cuda, arrays)["C"], want, rtol=1e-5, atol=1e-5)
    unsynced = replace(kernel.cuda, source=kernel.cuda.source.replace("__syncthreads();", ";"))
    assert unsynced.source != kernel.cuda.source
    got = run_host(unsynced, arrays)["C"]
    assert not np.allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=False)


def test_blocks_with_barriers_run_on_several_cores_with_their_own_shared_tiles():
    """Many staged blocks at once (the emulation spreads blocks over the cores): each block's
    __shared__ tiles are its own, or blocks would read each other's copies."""
    kernel = compile(
        parse(MATMUL, name="mm").bind(M=256, N=256, K=48),
        pins={"i": {"threads": 8, "seq": 1}, "j": {"threads": 32, "seq": 1}, "k": {"tile": 16}},
    )
    mapped = kernel.mapping.kernels[0]
    assert mapped.staging is not None and "__syncthreads();" in kernel.source
    assert [lm.blocks for lm in mapped.loops] == [32, 8]  # 256 blocks of 256 threads
    for seed in range(3):
        _check_on_host(kernel, seed=seed)


def test_the_portable_fiber_switch_runs_staged_blocks_too(monkeypatch):
    """Off x86-64 the fibers switch with ucontext's swapcontext (POLYMAP_HOST_UCONTEXT forces
    that path here): the same staged kernel, the same result."""
    import polymap.runtime.host as host

    monkeypatch.setattr(host, "FLAGS", (*host.FLAGS, "-DPOLYMAP_HOST_UCONTEXT"))
    kernel = compile(
        parse(MATMUL, name="mm").bind(M=40, N=72, K=33),
        pins={"i": {"threads": 8, "seq": 1}, "j": {"threads": 32, "seq": 1}, "k": {"tile": 16}},
    )
    assert kernel.mapping.kernels[0].staging is not None and "__syncthreads();" in kernel.source
    _check_on_host(kernel)
