"""Tile copies in vectors (``Staging.copy_vectors``): which widths a tile allows, the proof
that a vector is aligned and inside the tile, the two paths of the emitted copy, the pin, and
the 128-bit loads in the machine code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_staging import MATMUL

import polymap.prove as verify_module
from polymap import compile, load, optimize, parse, reference, verify
from polymap.errors import ArgumentError, VerificationError
from polymap.mapping.staging import copy_vector, stage_candidates
from polymap.runtime.arguments import random_inputs

MODELS = Path(__file__).resolve().parents[1] / "models"

# B's rows start one element in: no vector of B's tile can start at a multiple of 4
# at 64^3 A and B stay in L2, and SCIP reads them from there: the copies these tests are
# about need their tiles pinned
STAGED = {"k": {"stage": ["A", "B"]}}

SHIFTED = """
param M
param N
param K
in  A: f32[M, K]
in  B: f32[K, N + 1]
out C: f32[M, N]
par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j + 1] } } }
"""


def _candidates(source: str, **sizes):
    program = parse(source, name="mm").bind(**sizes)
    # a thread per point: a small GEMM's k loop may run on a block's lanes, which stage nothing
    mapping = optimize(program, pins={"i": {"lanes": 1}, **STAGED})
    km = mapping.kernels[0]
    return program, {c.buffer: c for c in stage_candidates(km.kernel, program)}, mapping


def _check_on_host(kernel, sizes, seed=3):
    arrays = random_inputs(kernel.program, sizes, seed=seed)
    got = kernel.run_host(**arrays)
    want = reference(kernel.program.bind(**sizes) if sizes else kernel.program, **arrays)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


# ------------------------------------------------------------------ the widths allowed


def test_a_tile_copies_16_bytes_at_once_where_its_rows_allow():
    program, found, _ = _candidates(MATMUL)  # the rows' lengths K and N are sizes: tested at run time
    assert copy_vector(found["A"], program) == 4 and copy_vector(found["B"], program) == 4
    program, found, _ = _candidates(MATMUL, M=64, N=64, K=36)
    assert copy_vector(found["A"], program) == 4  # 36 = 4 * 9
    program, found, _ = _candidates(MATMUL, M=64, N=64, K=38)
    assert copy_vector(found["A"], program) == 2  # 38 = 2 * 19: rows of A start at even addresses only
    program, found, _ = _candidates(MATMUL, M=64, N=64, K=37)
    assert copy_vector(found["A"], program) == 1
    assert copy_vector(found["B"], program, limit=2) == 2  # a pin's limit


def test_an_offset_row_copies_one_element_at_a_time():
    program, found, mapping = _candidates(SHIFTED, M=64, N=64, K=64)
    assert copy_vector(found["B"], program) == 1
    assert mapping.kernels[0].staging.copy_vector("B") == 1


def test_an_offset_that_is_a_size_copies_one_element_at_a_time():
    """The solver maps the program at its cost sizes, where ``j + M`` reads ``j + 256``; the
    code is made for the program as written, where no width divides ``M`` for every M."""
    source = """
param M
param N
param K
in  B: f32[K, N]
in  D: f32[K, N + M]
inout C: f32[M, N]
par M i { par N j { seq K k { C[i, j] += B[k, j] * D[k, j + M] } } }
"""
    kernel = compile(parse(source, name="mm"), context="M >= 1 and N >= 1 and K >= 1")
    staging = kernel.mapping.kernels[0].staging
    assert "D" in staging.buffers and staging.copy_vector("D") == 1 and staging.copy_vector("B") == 4
    _check_on_host(kernel, {"M": 9, "N": 13, "K": 6})
    whole_body = """
param M
param N
in  A: f32[M, N + M]
in  X: f32[N]
out B: f32[N, M]
par N j { par M i { B[j, i] = A[i, j + M] + X[j] } }
"""
    kernel = compile(parse(whole_body, name="t"), context="M >= 1 and N >= 1")
    assert kernel.mapping.kernels[0].staging is not None
    assert kernel.mapping.kernels[0].staging.copy_vector("A") == 1
    _check_on_host(kernel, {"M": 7, "N": 5})


def test_f64_tiles_copy_two_elements_at_once():
    program, found, mapping = _candidates(MATMUL.replace("f32", "f64"), M=64, N=64, K=64)
    assert copy_vector(found["A"], program) == 2
    assert dict(mapping.kernels[0].staging.copy_vectors) == {"A": 2, "B": 2}


# ------------------------------------------------------------------ verify


def test_verify_rejects_a_misaligned_vector_copy():
    program = parse(SHIFTED, name="mm").bind(M=64, N=64, K=64)
    mapping = optimize(program, pins=STAGED)
    km = mapping.kernels[0]
    assert "B" in km.staging.buffers
    bad = dataclasses.replace(km, staging=dataclasses.replace(km.staging, copy_vectors=(("B", 4),)))
    with pytest.raises(VerificationError, match=r"would start at B\[0, 1\].*misaligned"):
        verify(mapping.program, (bad,))


@pytest.mark.parametrize(
    "vectors, message",
    [
        ({"A": 4}, "must be a tuple of \\(buffer, elements\\) pairs"),
        ((("A",),), "must be a tuple of \\(buffer, elements\\) pairs"),
        ((("C", 4),), "'C' which is not staged"),
        ((("A", 3),), "vectors of 3"),
        ((("A", 8),), "vectors of 8"),  # 32 bytes: wider than a load
        ((("A", 4), ("A", 4)), "'A' twice"),
    ],
)
def test_verify_rejects_copy_vectors_no_tile_can_have(vectors, message):
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=64)
    mapping = optimize(program, pins=STAGED)
    km = mapping.kernels[0]
    bad = dataclasses.replace(km, staging=dataclasses.replace(km.staging, copy_vectors=vectors))
    with pytest.raises(VerificationError, match=message):
        verify(mapping.program, (bad,))


def test_verify_finds_a_vector_that_would_read_past_the_tile(monkeypatch):
    """Without the launch's test of the row's length, a row of K = 4 q + 1 elements ends
    inside a vector: the proof names the lane outside the tile."""
    program = parse(MATMUL, name="mm")
    mapping = optimize(program, context="M >= 1 and N >= 1 and K >= 1")
    real = verify_module.shared_plan

    def plan(*args):
        found = real(*args)
        copies = []
        for copy in found.copies:
            if copy.vectors is not None:
                anything = copy.vectors.condition.universe(copy.vectors.condition.get_space())
                copy = dataclasses.replace(
                    copy, vectors=dataclasses.replace(copy.vectors, condition=anything)
                )
            copies.append(copy)
        return dataclasses.replace(found, copies=tuple(copies))

    monkeypatch.setattr(verify_module, "shared_plan", plan)
    with pytest.raises(VerificationError, match=r"lane [123] of group .* is outside the tile"):
        verify(mapping.program, mapping.kernels, context="M >= 1 and N >= 1 and K >= 1")


def test_the_proof_of_the_vectors_is_reported():
    mapping = optimize(load(MODELS / "matmul_1024.te"))
    text = mapping.report(proofs=True)
    assert "copies of A in vectors of 4, B in vectors of 4" in text
    assert "the copy of B's tile loads 4 elements at once, each vector aligned" in text


# ------------------------------------------------------------------ the code


def test_both_paths_of_the_copy_equal_the_reference_on_the_host():
    """One kernel, symbolic sizes: K % 4 == 0 takes A's vectors, K % 4 != 0 its elements one
    by one (each lane under isl's condition), N likewise for B."""
    program = parse(MATMUL, name="mm")
    context = "M >= 1 and N >= 1 and K >= 1"
    # one slot per tile: through registers; two: with cp.async (16 bytes where B's rows allow)
    for slots, vector in ((1, "pm_load_vec<4>(&B["), (2, "pm_copy_async<16>(&B_sh[")):
        pins = {
            "i": {"seq": 4},
            "j": {"seq": 4, "distribution": "blocked"},
            "k": {"tile": 16, "slots": slots},
        }
        kernel = compile(program, optimize(program, context=context, pins=pins))
        source = kernel.source
        assert "const bool A_vectors = pm_aligned(A, 16) && (K % 4 == 0);" in source
        assert "const bool B_vectors = pm_aligned(B, 16) && (N % 4 == 0);" in source
        assert vector in source
        for sizes in ({"M": 33, "N": 68, "K": 40}, {"M": 20, "N": 45, "K": 13}, {"M": 5, "N": 3, "K": 2}):
            _check_on_host(kernel, sizes)


def test_a_tile_not_transposed_goes_into_shared_memory_in_one_store():
    program = load(MODELS / "matmul_1024.te")
    single = compile(program, optimize(program, pins={"k": {"slots": 1, "stage": ["A", "B"]}})).source
    assert "pm_store_vec<4>(&B_sh[" in single  # B's rows keep 16-byte alignment
    assert "pm_store_vec<4>(&A_sh[" not in single  # A's tile is transposed: four stores
    double = compile(program).source  # SCIP's mapping: double-buffered, one cp.async per vector
    assert "pm_copy_async<16>(&B_sh[" in double
    assert "pm_copy_async<16>(&A_sh[" not in double and "pm_copy_async<4>(&A_sh[" in double


def test_the_copy_pin_keeps_the_copies_element_wise():
    program = parse(MATMUL, name="mm").bind(M=64, N=64, K=64)
    mapping = optimize(program, pins={"k": {"copy": 1, "stage": ["A", "B"]}})
    assert mapping.kernels[0].staging.copy_vectors == ()
    source = compile(program, mapping).source
    assert "pm_load_vec" not in source.split("__global__", 1)[1]
    narrow = optimize(program, pins={"k": {"copy": 2, "stage": ["A", "B"]}})
    assert dict(narrow.kernels[0].staging.copy_vectors) == {"A": 2, "B": 2}
    # the copies' loads are part of the cost: the element-wise ones issue more
    assert mapping.costs[0].issue_s > narrow.costs[0].issue_s
    for bad in (3, 0, "four", True):
        with pytest.raises(ArgumentError, match="copy is the most elements"):
            optimize(program, pins={"k": {"copy": bad}})
    with pytest.raises(ArgumentError, match="'copy' and 'slots' apply to a seq loop"):
        optimize(program, pins={"i": {"copy": 2}})


def test_the_command_line_pins_the_copy_width(capsys):
    from polymap.cli import main

    assert main(["map", str(MODELS / "matmul_256x256x32.te"), "--pin", "k.copy=2"]) == 0
    assert "copies of A in vectors of 2, B in vectors of 2" in capsys.readouterr().out
