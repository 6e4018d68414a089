"""Double-buffered tiles (``Staging.slots`` 2): the schedule that copies the next tile while
the block computes this one, its proof (and the broken schedules the proof rejects), the
asynchronous copies of the emitted code, the pin, the tile-loads roof that makes it worth
its shared memory, and runs on the host equal to the reference."""

from __future__ import annotations

import dataclasses

import islpy as isl
import numpy as np
import pytest
from test_staging import MATMUL

import polymap.schedule.shared as shared_module
from polymap import compile, optimize, parse, reference
from polymap.errors import ArgumentError, VerificationError
from polymap.runtime import cuobjdump
from polymap.runtime.arguments import random_inputs
from polymap.targets import H100

SIZES = {"M": 70, "N": 130, "K": 50}  # no size a multiple of a tile; K % 4 != 0: no vector copies


def _doubled(mapping, slots=2):
    """``mapping`` with every tiled staging in ``slots`` slots (a hand-made mapping)."""
    kernels = tuple(
        dataclasses.replace(k, staging=dataclasses.replace(k.staging, slots=slots))
        if k.staging is not None and k.staging.loop is not None
        else k
        for k in mapping.kernels
    )
    return dataclasses.replace(mapping, kernels=kernels)


def _check_on_host(kernel, sizes, seed=5):
    arrays = random_inputs(kernel.program, sizes, seed=seed)
    got = kernel.run_host(**arrays)
    want = reference(kernel.program.bind(**sizes), **arrays)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.fixture(scope="module")
def gemm():
    program = parse(MATMUL, name="mm")
    return program, optimize(program, pins={"k": {"tile": 16, "slots": 1}})


def test_a_pinned_double_buffer_is_the_mapping_and_its_code_copies_one_step_ahead(gemm):
    program, _ = gemm
    mapping = optimize(program, pins={"k": {"tile": 16, "slots": 2}})
    staging = mapping.kernels[0].staging
    assert staging.slots == 2 and staging.tile == 16
    assert "double-buffered" in str(mapping)
    source = compile(program, mapping).source
    assert source.count("pm_copy_async<") >= 2  # A's and B's copies, asynchronous
    # one barrier a step, after the thread's copies have landed; none before the compute
    steps = source.count("__syncthreads();")
    assert source.count("pm_copy_wait();\n") == steps > 0
    assert "[2][16]" in source  # the tiles' two slots
    assert "kt = -1;" in source  # step -1 copies tile 0 only


def test_double_buffered_gemms_run_on_the_host_equal_to_the_reference(gemm):
    program, single = gemm
    # sizes that divide nothing and rows that are no multiple of a vector: every guard and
    # the element-wise path of the copies run
    _check_on_host(compile(program, _doubled(single)), SIZES)
    # vector copies, a row of B read in vectors
    _check_on_host(compile(program, _doubled(single)), {"M": 96, "N": 256, "K": 64})
    # a single tile: step -1 copies it, step 0 computes it, no barrier after
    _check_on_host(compile(program, _doubled(single)), {"M": 33, "N": 64, "K": 9})


def test_a_double_buffered_f16_tile_copies_at_once_where_cp_async_cannot():
    source = MATMUL.replace("f32[M, K]", "f16[M, K]").replace("f32[K, N]", "f16[K, N]")
    program = parse(source, name="mm16")
    mapping = _doubled(optimize(program, pins={"k": {"tile": 16}}))
    kernel = compile(program, mapping)
    _check_on_host(kernel, SIZES)  # 2-byte elements: stored at once, the proof allows it


def test_verify_rejects_a_double_buffer_whose_tiles_share_one_slot(gemm, monkeypatch):
    program, single = gemm
    # every tile into slot 0: the copy of tile kt + 1 overwrites the tile the block reads
    monkeypatch.setattr(shared_module, "_slot", lambda slots, kt: ("0",) if slots > 1 else ())
    with pytest.raises(VerificationError, match="barrier is missing|overwrote"):
        compile(program, _doubled(single))


def test_verify_rejects_a_double_buffer_without_the_barrier_after_the_first_copy(gemm, monkeypatch):
    program, single = gemm
    real = shared_module.shared_plan

    def without_step_minus_one(model, frame, width):
        """The plan with the barrier of step -1 dropped: tile 0's asynchronous copy is then
        read at step 0 with no barrier (and no wait) in between."""
        plan = real(model, frame, width)
        barriers = []
        for b in plan.barriers:
            steps = b.relation.range()
            kept = steps.lower_bound_val(isl.dim_type.set, steps.dim(isl.dim_type.set) - 1, 0)
            barriers.append(
                dataclasses.replace(
                    b, relation=b.relation.intersect_range(kept), time=b.time.intersect_domain(kept)
                )
            )
        return dataclasses.replace(plan, barriers=tuple(barriers))

    monkeypatch.setattr("polymap.prove.shared_plan", without_step_minus_one)
    with pytest.raises(VerificationError, match="barrier is missing"):
        compile(program, _doubled(single))


def test_the_slots_pin_is_checked():
    program = parse(MATMUL, name="mm")
    with pytest.raises(ArgumentError, match="slots is the tiles a staged buffer holds at once"):
        optimize(program, pins={"k": {"slots": 3}})
    # over the whole body there is one tile: nothing to double-buffer
    body = parse(
        "in A: f32[64, 64]\nout B: f32[64, 64]\npar 64 i { par 64 j { B[i, j] = A[j, i] } }", name="t"
    )
    km = optimize(body, pins={"j": {"threads": 32}}).kernels[0]
    if km.staging is not None:
        broken = dataclasses.replace(km, staging=dataclasses.replace(km.staging, slots=2))
        with pytest.raises(VerificationError, match="nothing to double-buffer"):
            compile(body, dataclasses.replace(optimize(body), kernels=(broken,)))


def test_single_buffered_tile_loads_add_to_the_roofs_and_double_buffered_overlap_them(gemm):
    """The tile-loads roof by hand: K = 1024 in tiles of 16 is 64 tiles, each waiting the
    target's memory latency (1.3 us): 83.2 us. One slot per tile adds them to the highest
    roof; two slots take the larger of the two."""
    program, _ = gemm
    bound = program.bind(M=1024, N=1024, K=1024)
    single = optimize(bound, pins={"k": {"tile": 16, "slots": 1}})
    double = compile(bound, _doubled(single)).mapping
    waits = 64 * H100.memory_latency_s
    assert waits == pytest.approx(83.2e-6)
    for cost in (single.costs[0], double.costs[0]):
        assert cost.tile_latency_s == pytest.approx(waits)
    roofs = single.costs[0]
    highest = max(roofs.memory_s, roofs.compute_s, roofs.shared_s, roofs.issue_s) / roofs.fill
    assert single.costs[0].time_s == pytest.approx(highest + waits)
    assert double.costs[0].time_s == pytest.approx(max(highest, waits))
    assert "tile loads" in single.costs[0].bound_by


def test_scip_double_buffers_a_gemm_whose_tiles_would_wait():
    """At 1024^3 the tiles' waits dominate a single-buffered GEMM; SCIP takes two slots."""
    program = parse(MATMUL, name="mm").bind(M=1024, N=1024, K=1024)
    mapping = optimize(program)
    staging = mapping.kernels[0].staging
    assert staging is not None and staging.slots == 2
    assert not mapping.costs[0].bound_by.endswith("tile loads")


# ------------------------------------------------------------- found by a review


U8 = """
param M
param N
param K
in  A: u8[K, M]
in  B: u8[K, N]
out C: i32[M, N]
par M i { par N j { seq K k { C[i, j] += A[k, i] * B[k, j] } } }
"""


def test_a_two_byte_vector_is_stored_at_once_not_by_cp_async(gemm):
    """cp.async moves 4, 8 or 16 bytes: a u8 tile copied two elements at a time was emitted
    as ``pm_copy_async<2>``, which ptxas refuses (the host's memcpy hid it)."""
    program = parse(U8, name="u8").bind(N=258)
    pins = {
        "i": {"seq": 4, "interleave": True},
        "j": {"threads": 32, "seq": 8, "distribution": "blocked"},
        "k": {"tile": 16, "stage": ["B"], "slots": 1},
    }
    mapping = _doubled(optimize(program, pins=pins))
    assert dict(mapping.kernels[0].staging.copy_vectors) == {"B": 2}
    kernel = compile(program, mapping)
    assert "pm_copy_async<2>" not in kernel.source and "pm_copy_async<1>" not in kernel.source
    _check_on_host(kernel, {"M": 33, "K": 20})
    kernel.ptx()  # NVRTC; the cubin's ptxas below reads the inline cp.async too
    if not cuobjdump.cuobjdump_available():
        pytest.skip("cuobjdump missing (pip install -e '.[test]' installs it)")
    kernel.machine_code()


def test_scip_double_buffers_only_tiles_that_cp_async_copies():
    """A 1- or 2-byte element is stored at once, so its wait would overlap nothing: SCIP does
    not double-buffer such a tile, and a hand-made double buffer of one is not charged as
    overlapped; the pin asking for it is refused."""
    program = parse(U8, name="u8").bind(M=1024, N=1024, K=1024)
    for km in optimize(program).kernels:
        assert km.staging is None or km.staging.slots == 1
    single = optimize(program, pins={"k": {"tile": 16, "stage": ["A", "B"], "slots": 1}})
    hand = compile(program, _doubled(single)).mapping
    assert not hand.costs[0].tile_loads_overlap
    with pytest.raises(ArgumentError, match="4- or 8-byte elements"):
        optimize(program, pins={"k": {"slots": 2}})


def test_the_tile_is_proved_inside_its_declared_array(gemm, monkeypatch):
    program, single = gemm
    # a slot of 3 values in an array of two: every other statement of the proof holds
    monkeypatch.setattr(shared_module, "_slot", lambda slots, kt: (f"({kt}) mod 3",) if slots > 1 else ())
    with pytest.raises(VerificationError, match="outside the array"):
        compile(program, _doubled(single))


def test_a_slots_pin_that_would_be_ignored_is_refused():
    program = parse(MATMUL, name="mm")
    with pytest.raises(ArgumentError, match="stages nothing"):
        optimize(program, pins={"k": {"slots": 2, "stage": []}})
    with pytest.raises(ArgumentError, match="slots is the tiles"):
        optimize(program, pins={"k": {"slots": 2.0}})
    with pytest.raises(ArgumentError, match="staging is off"):
        optimize(program, pins={"k": {"slots": 2}}, staging=False)
    # two slots with nothing staged is no mapping: a staged tile comes with them
    mapping = optimize(program.bind(M=64, N=64, K=4096), pins={"k": {"tile": 1, "slots": 2, "split": 1}})
    assert mapping.kernels[0].staging is not None and mapping.kernels[0].staging.slots == 2


def test_a_hand_made_staging_that_does_not_fit_shared_memory_is_refused(gemm):
    program, _ = gemm
    pins = {
        "i": {"threads": 8, "seq": 8, "distribution": "blocked", "interleave": True},
        "j": {"threads": 32, "seq": 4, "distribution": "blocked"},
        "k": {"tile": 16, "slots": 1, "stage": ["A", "B"], "transpose": ["A"]},
    }
    mapping = optimize(program, pins=pins)
    km = mapping.kernels[0]
    big = dataclasses.replace(km, staging=dataclasses.replace(km.staging, tile=64, slots=2))
    with pytest.raises(ArgumentError, match="bytes of shared memory per block"):
        compile(program, dataclasses.replace(mapping, kernels=(big,)))
