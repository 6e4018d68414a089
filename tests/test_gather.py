"""Gathers (issue 13): a read ``A[I[i], j]`` whose index is read from an integer buffer.

Expected values are NumPy's fancy indexing written here; the reference, the scalar oracle
(``tests/oracle.py``) and the emitted code on the host are each held to them, and NVRTC
compiles the code. An index outside its dimension is a ``BoundsError`` from both
executors; misuse is a located error; the model reads the whole dimension (a race and a
dependence through a gathered element are found).
"""

from __future__ import annotations

import numpy as np
import pytest
from everywhere import run_everywhere

import polymap
from polymap.errors import ArityError, BoundsError, NotAffineError, ProgramError, RaceError
from polymap.ir.parse import parse
from polymap.poly.model import analyze
from polymap.reference import reference

EMBEDDING = """param V = 50
param N = 40
param D = 24
in  E: f32[V, D]
in  ids: i32[N]
out Y: f32[N, D]
par N i { par D j { Y[i, j] = E[ids[i], j] } }
"""


def _everywhere(program, inputs: dict, want: dict):
    runs, kernel = run_everywhere(program, inputs)
    for name, expected in want.items():
        np.testing.assert_allclose(runs["reference"][name], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(runs["oracle"][name], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(runs["host"][name], expected, rtol=1e-5, atol=1e-6)
    return kernel


def test_an_embedding_lookup_runs_everywhere():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((50, 24)).astype(np.float32)
    ids = rng.integers(0, 50, 40).astype(np.int32)
    kernel = _everywhere(parse(EMBEDDING, name="emb").bind_defaults(), {"E": e, "ids": ids}, {"Y": e[ids]})
    # the emitted read checks the id against V where it is used
    assert "pm_gather(" in kernel.source and "PM_FAULT_GATHER(0)" in kernel.source


CASES = {
    # a permutation of the columns, the gathered index moving along the lanes
    "columns": (
        """param N = 9
param M = 13
in X: f32[N, M]
in perm: i32[M]
out Y: f32[N, M]
par N i { par M j { Y[i, j] = X[i, perm[j]] } }""",
        {"X": (9, 13), "perm": ((13,), 13)},
        lambda a: {"Y": a["X"][:, a["perm"]]},
    ),
    # an i64 index in a reduction (its type is no part of the statement's: it computes in f32)
    "reduction": (
        """param V = 20
param N = 11
param K = 7
in W: f32[V, K]
in ids: i64[N]
in x: f32[K]
out y: f32[N]
par N i { seq K k { y[i] += W[ids[i], k] * x[k] } }""",
        {"W": (20, 7), "ids": ((11,), 20), "x": (7,)},
        lambda a: {"y": a["W"][a["ids"]] @ a["x"]},
    ),
    # a 0-d u8 buffer as the row, and two gathers of one read (an i8 column)
    "scalar-and-pairs": (
        """param R = 16
param C = 12
param N = 30
in A: f64[R, C]
in n: u8
in r: i32[N]
in c: i8[N]
out row: f64[C]
out y: f64[N]
par C j { row[j] = A[n, j] }
par N i { y[i] = A[r[i], c[i]] + A[r[i], 0] }""",
        {"A": (16, 12), "n": ((), 16), "r": ((30,), 16), "c": ((30,), 12)},
        lambda a: {"row": a["A"][int(a["n"])], "y": a["A"][a["r"], a["c"]] + a["A"][a["r"], 0]},
    ),
    # the index buffer computed by an earlier nest: the gather depends on every element
    "computed-index": (
        """param N = 64
param V = 32
in src: i32[N]
in E: f32[V]
new idx: i32[N]
out Y: f32[N]
par N i { idx[i] = (src[i] * 7) % V }
par N i { Y[i] = E[idx[i]] * 2 }""",
        {"src": ((64,), 1000), "E": (32,)},
        lambda a: {"Y": a["E"][(a["src"] * 7) % 32] * 2},
    ),
    # a running index in a register: the promoted accumulator c is also the gather's source
    "register-index": (
        """param N = 16
param K = 8
param V = 64
in E: f32[V]
in a: i32[N, K]
out c: i32[N]
out y: f32[N]
par N i { seq K k { c[i] += a[i, k]
  y[i] += E[c[i]] } }""",
        {"E": (64,), "a": ((16, 8), 4)},
        lambda a: {
            "c": a["a"].sum(axis=1),
            "y": np.array([sum(a["E"][v] for v in np.cumsum(row)) for row in a["a"]]),
        },
    ),
}


def _inputs(shapes: dict, program) -> dict:
    """Standard-normal floats of the given shapes; integers of ``(shape, high)`` in [0, high)."""
    rng = np.random.default_rng(3)
    out = {}
    for name, shape in shapes.items():
        dtype = program.buffer(name).dtype.numpy
        if np.issubdtype(dtype, np.integer):
            dims, high = shape
            out[name] = np.asarray(rng.integers(0, high, dims)).astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_gathers_of_every_kind_match_numpy(name):
    text, shapes, formula = CASES[name]
    program = parse(text, name=name.replace("-", "_")).bind_defaults()
    inputs = _inputs(shapes, program)
    want = formula({k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inputs.items()})
    _everywhere(program, inputs, want)
    if name == "register-index":  # the loop's accumulators are registers, the gather reads one
        kernel = polymap.compile(program)
        assert "E[pm_gather((int)c_acc" in kernel.source


def test_an_index_outside_its_dimension_is_a_bounds_error_naming_it():
    program = parse(EMBEDDING, name="emb", source="emb.te").bind_defaults()
    e = np.zeros((50, 24), np.float32)
    ids = np.arange(40, dtype=np.int32)
    kernel = polymap.compile(program)
    for bad in (50, -1):
        ids[17] = bad
        with pytest.raises(BoundsError) as ref:
            reference(program, E=e, ids=ids)
        assert f"ids[17] = {bad}, read as index 0 of E in E[ids[i], j], is outside [0, 50)" in str(ref.value)
        assert ref.value.loc is not None and (ref.value.loc.line, ref.value.loc.col) == (7, 33)
        with pytest.raises(BoundsError) as host:
            kernel.run_host(E=e, ids=ids)
        assert "a value of ids[i], read as index 0 of E in E[ids[i], j], is outside [0, 50)" in str(
            host.value
        )
        assert host.value.loc == ref.value.loc


def test_a_gather_in_the_operand_a_select_does_not_take_is_not_checked():
    program = parse(
        """param V = 20
param N = 30
in E: f32[V]
in ids: i32[N]
out Y: f32[N]
par N i { Y[i] = select(ids[i] >= 0, E[ids[i]], 0) }""",
        name="guarded",
    ).bind_defaults()
    rng = np.random.default_rng(5)
    e = rng.standard_normal(20).astype(np.float32)
    ids = rng.integers(-20, 20, 30).astype(np.int32)  # the negative ones are never used
    want = np.where(ids >= 0, e[np.maximum(ids, 0)], 0)
    _everywhere(program, {"E": e, "ids": ids}, {"Y": want})


@pytest.mark.parametrize(
    ("body", "error", "words", "col"),
    [
        ("Y[i, j] = F[fl[i], j]", ProgramError, "buffer 'fl' is f32: an index read from a buffer", 15),
        ("Y[i, j] = E[ids[i] + 1, j]", NotAffineError, "may stand only as a whole index of an access", 15),
        ("Y[ids[i], j] = E[i, j]", ProgramError, "must be an update that runs as an atomic", 3),
        ("Y[i, j] = E[ids[ids[i]], j]", NotAffineError, "a gather's indices are affine", 19),
        ("Y[i, j] = E[ids[i, j], j]", ArityError, "buffer 'ids' has 1 dimension(s)", 15),
        ("seq ids[i] k { Y[i, j] = E[i, j] }", NotAffineError, "in the extent of loop 'k'", 7),
    ],
)
def test_misused_gathers_are_located_errors(body, error, words, col):
    text = f"""param N = 4
in  E: f32[N, N]
in  F: f32[N, N]
in  fl: f32[N]
in  ids: i32[N]
out Y: f32[N, N]
par N i {{ par N j {{
  {body}
}} }}
"""
    with pytest.raises(error) as info:
        parse(text, name="misuse")
    assert words in str(info.value)
    assert info.value.loc is not None and info.value.loc.line == 8
    assert info.value.loc.col == col


def test_the_gather_source_and_the_other_indices_are_proved_in_bounds():
    with pytest.raises(BoundsError, match=r"reads ids\[i \+ 1\]"):
        analyze(parse(EMBEDDING.replace("E[ids[i], j]", "E[ids[i + 1], j]")))
    with pytest.raises(BoundsError, match=r"reads E\[ids\[0\], 24\]"):
        analyze(parse(EMBEDDING.replace("E[ids[i], j]", "E[ids[i], j + 1]")).bind_defaults())
    # a dimension that may be empty: no value could be in bounds (pm_gather's element 0 must exist)
    with pytest.raises(BoundsError, match=r"with V = 1"):
        analyze(parse(EMBEDDING.replace("E: f32[V, D]", "E: f32[V - 1, D]")))


def test_the_model_reads_the_whole_dimension():
    import islpy as isl

    model = analyze(parse(EMBEDDING).bind_defaults())
    (s,) = model.statements
    assert {a.buffer: a.gathered for a in s.reads} == {"ids": (), "E": (0,)}
    gathered = next(a for a in s.reads if a.buffer == "E")
    # every row of E at every instance: the may-read of the gather
    want = isl.Map("{ S0[i, j] -> E[g, j] : 0 <= i < 40 and 0 <= j < 24 and 0 <= g < 50 }")
    assert gathered.relation.is_equal(want)
    # and the function the code is printed from reads row 0, where pm_gather's value goes
    assert gathered.address.is_equal(isl.Map("{ S0[i, j] -> E[0, j] : 0 <= i < 40 and 0 <= j < 24 }"))


def test_a_write_and_a_gather_of_one_buffer_in_one_par_loop_race():
    """Iteration i writes T[i] and reads T[ids[i]]: any other iteration's element."""
    text = """param N = 8
in  ids: i32[N]
in  x: f32[N]
new T: f32[N]
out Y: f32[N]
par N i {
  T[i] = x[i]
  Y[i] = T[ids[i]]
}
"""
    with pytest.raises(RaceError):
        analyze(parse(text))


def test_an_embedding_and_layer_norm_on_the_lanes_matches_numpy():
    program = polymap.load("models/embedding_layernorm.te").bind(V=70, T=33, D=100)
    rng = np.random.default_rng(9)
    args = {
        "wte": rng.standard_normal((70, 100)).astype(np.float32),
        "wpe": rng.standard_normal((33, 100)).astype(np.float32),
        "ids": rng.integers(0, 70, 33).astype(np.int32),
        "gamma": rng.standard_normal(100).astype(np.float32),
        "beta": rng.standard_normal(100).astype(np.float32),
    }
    x = args["wte"].astype(np.float64)[args["ids"]] + args["wpe"]
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * args["gamma"] + args["beta"]
    kernel = polymap.compile(program)
    # 33 tokens: a block of 4 warps per token (one per 32 of its 100 columns), its sums on the lanes
    assert kernel.mapping.kernels[0].lanes == 128
    got = kernel.run_host(**args)["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_random_inputs_draw_gathered_indices_inside_the_dimension():
    """``polymap run``'s inputs: an index buffer gets values below the smallest extent it
    indexes (here 3, where other integers are drawn from 1 to 5)."""
    from polymap.runtime.arguments import random_inputs

    program = parse(
        """param N = 400
in  E: f32[3, 4]
in  F: f32[7]
in  ids: i32[N]
in  other: i32[N]
out Y: f32[N]
par N i { Y[i] = E[ids[i], 1] + F[ids[i]] + other[i] }""",
        name="small_table",
    ).bind_defaults()
    inputs = random_inputs(program, {})
    assert set(np.unique(inputs["ids"])) == {0, 1, 2}
    # below the type's largest value too: i8 indices into 200 rows, bool into 5
    narrow = parse(
        """in E: f32[200, 5]
in c: i8[64]
in b: bool[64]
out Y: f32[64]
par 64 i { Y[i] = E[c[i], b[i]] }""",
        name="narrow",
    )
    drawn = random_inputs(narrow, {})
    assert drawn["c"].min() >= 0 and drawn["c"].max() > 100 and set(np.unique(drawn["b"])) == {False, True}
    reference(narrow, **drawn)
    assert inputs["other"].min() >= 1  # not an index buffer: never 0
    reference(program, **inputs)  # in bounds


def test_the_run_names_the_extent_in_numbers_and_decodes_only_its_own_codes():
    from polymap.ir.gather_faults import GATHER_FLAG, GATHER_SHIFT, MAX_GATHER_ORDINAL
    from polymap.runtime.faults import fault_error

    kernel = polymap.compile(parse(EMBEDDING, name="emb"))  # V symbolic
    ids = np.arange(40, dtype=np.int32)
    ids[3] = 77
    with pytest.raises(
        BoundsError, match=r"read as index 0 of E in E\[ids\[i\], j\], is outside \[0, V = 50\)"
    ):
        kernel.run_host(E=np.zeros((50, 24), np.float32), ids=ids)
    cuda = kernel.cuda
    line = next(
        n for n, text in enumerate(cuda.source.splitlines(), 1) if "pm_gather(" in text and "E[" in text
    )
    error = fault_error(cuda, line + GATHER_FLAG + (1 << GATHER_SHIFT))  # ordinal 1: the statement has one
    assert not isinstance(error, BoundsError) and "gather 1 of 1" in str(error)
    error = fault_error(cuda, line + GATHER_FLAG + (MAX_GATHER_ORDINAL << GATHER_SHIFT))
    assert "gather 127 of 1" in str(error)


@pytest.mark.slow
def test_a_statement_with_more_gathers_than_the_fault_word_counts_names_them_together():
    """130 gathered reads in one statement (15 s to compile): ordinals from 127 on share one
    code, which the run reports as the statement's later gathers, never as another fault."""
    terms = [f"E[a[i], {c}]" for c in range(130)]
    while len(terms) > 1:
        terms = [f"({' + '.join(terms[k : k + 2])})" for k in range(0, len(terms), 2)]
    program = parse(
        f"param N = 4\nin E: f32[3, 130]\nin a: i32[N]\nout Y: f32[N]\npar N i {{ Y[i] = {terms[0]} }}",
        name="many",
    ).bind_defaults()
    kernel = polymap.compile(program)
    with pytest.raises(BoundsError, match="one of its gathered indices from the 128th on"):
        kernel.run_host(E=np.ones((3, 130), np.float32), a=np.array([0, 1, 3, 1], np.int32))
