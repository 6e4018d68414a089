"""Register promotion of reduction accumulators (polymap.transform.registers).

Expected programs are written out by hand here; expected values come from NumPy formulas
or from the reference executor run on the *original* program, never from the pass.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from polymap.errors import BoundsError, RaceError
from polymap.ir import walk
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    BufferKind,
    Const,
    DType,
    IConst,
    IVar,
    Loop,
    LoopKind,
    New,
    Program,
    Read,
    ValueOp,
)
from polymap.ir.parse import load, parse
from polymap.poly.model import analyze
from polymap.reference import reference
from polymap.transform.registers import promote_accumulators, renumber_statements

ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(20240917)


def te(text: str, name: str = "t") -> Program:
    return parse(textwrap.dedent(text), name=name)


def body_text(program: Program) -> str:
    """The printed program without its header: the name, bound sizes, sizes, buffers."""
    header = 1 + bool(program.bindings) + bool(program.params) + len(program.buffers)
    return "\n".join(str(program).splitlines()[header:]) + "\n"


def random_inputs(program: Program, rng=RNG) -> dict[str, np.ndarray]:
    inputs = {}
    for decl in program.inputs:
        assert all(isinstance(e, IConst) for e in decl.shape), decl
        shape = tuple(e.value for e in decl.shape)
        inputs[decl.name] = rng.standard_normal(shape).astype(decl.dtype.numpy)
    return inputs


def run(program: Program, inputs: dict) -> dict[str, np.ndarray]:
    return {
        k: np.asarray(v) for k, v in reference(program, **{k: v.copy() for k, v in inputs.items()}).items()
    }


def assert_same_outputs(original: Program, promoted: Program, inputs: dict) -> dict[str, np.ndarray]:
    want, got = run(original, inputs), run(promoted, inputs)
    assert set(want) == set(got)
    for name in want:
        # The register has the buffer's dtype and sees the same operations in the same
        # order: the results are equal bit for bit.
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    return got


def statement_names(program: Program) -> list[str]:
    return [ctx.name for ctx in walk.statements(program)]


def assert_numbered(program: Program) -> None:
    assert statement_names(program) == [f"S{k}" for k in range(len(statement_names(program)))]


# -------------------------------------------------------------------- matmul

MATMUL = """
param M, N, K
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } }
"""


def test_matmul_accumulates_in_a_register():
    promoted = promote_accumulators(te(MATMUL, "matmul"))
    assert body_text(promoted) == textwrap.dedent(
        """\
        par M i {
          par N j {
            new C_acc: f32
            C_acc = 0
            seq K k {
              C_acc += A[i, k] * B[k, j]
            }
            C[i, j] = C_acc
          }
        }
        """
    )


def test_matmul_promoted_structure_and_names():
    i, j, k = IVar("i"), IVar("j"), IVar("k")
    promoted = promote_accumulators(te(MATMUL, "matmul"))
    (outer,) = promoted.body
    (inner,) = outer.body
    assert inner.body == (
        New(BufferDecl("C_acc", BufferKind.NEW, DType.F32, ())),
        Assign("S0", "C_acc", (), AssignOp.SET, Const(0)),  # C is out: nothing wrote it (isl)
        Loop(
            LoopKind.SEQ,
            "k",
            IVar("K"),
            (
                Assign(
                    "S1", "C_acc", (), AssignOp.ADD, Binary(ValueOp.MUL, Read("A", (i, k)), Read("B", (k, j)))
                ),
            ),
        ),
        Assign("S2", "C", (i, j), AssignOp.SET, Read("C_acc", ())),
    )


def test_matmul_keeps_declarations_and_source_positions():
    original = te(MATMUL, "matmul")
    promoted = promote_accumulators(original)
    assert (promoted.name, promoted.params, promoted.buffers, promoted.bindings) == (
        original.name,
        original.params,
        original.buffers,
        original.bindings,
    )
    assert promoted.text == original.text and promoted.source == original.source
    loop_k = original.body[0].body[0].body[0]
    (load_, update, store) = [ctx.stmt for ctx in walk.statements(promoted)]
    assert loop_k.loc is not None
    assert load_.loc == loop_k.loc and store.loc == loop_k.loc
    assert update.loc == loop_k.body[0].loc


def test_matmul_values_equal_numpy():
    original = te(MATMUL, "matmul").bind(M=3, N=4, K=5)
    promoted = promote_accumulators(original)
    assert promoted != original
    inputs = {
        "A": RNG.standard_normal((3, 5)).astype(np.float32),
        "B": RNG.standard_normal((5, 4)).astype(np.float32),
    }
    got = assert_same_outputs(original, promoted, inputs)
    np.testing.assert_allclose(got["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-6)


def test_promoted_program_prints_as_valid_te():
    promoted = promote_accumulators(te(MATMUL, "matmul"))
    # The parser numbers statements in textual order: equal only if the pass renumbered.
    assert parse(str(promoted), name="matmul") == promoted
    analyze(promoted)


# -------------------------------------------------------------------- models

MODEL_SIZES = {
    "matmul_1024": {"M": 3, "N": 4, "K": 5},
    "gemv": {"M": 4, "N": 6},
    "softmax_rows": {"M": 3, "N": 5},
    "gpt3_attention_tiny": {"SEQ": 4, "DIM": 3},
    "trmv_lower": {"N": 5},
    "syrk_lower": {"N": 4, "M": 3},
    "batched_matmul": {"NB": 2, "M": 3, "K": 4, "N": 2},
}
UNCHANGED_MODELS = {"softmax_rows"}  # its accumulators are block-local already


@pytest.mark.parametrize("name", sorted(MODEL_SIZES))
def test_models_compute_the_same_after_promotion(name):
    program = load(ROOT / "models" / f"{name}.te")
    promoted = promote_accumulators(program)
    assert (promoted == program) == (name in UNCHANGED_MODELS)
    assert_numbered(promoted)
    original = program.bind(**MODEL_SIZES[name])
    inputs = random_inputs(original)
    assert_same_outputs(original, promoted.bind(**MODEL_SIZES[name]), inputs)
    # Promoting after binding gives the same program as binding after promoting.
    assert promote_accumulators(original) == promoted.bind(**MODEL_SIZES[name])


def test_gpt3_tiny_gets_one_register_per_reduction():
    promoted = promote_accumulators(load(ROOT / "models" / "gpt3_attention_tiny.te"))
    locals_ = [d.name for d in promoted.all_buffers()[len(promoted.buffers) :]]
    assert locals_ == ["Q_acc", "S_acc", "O_acc"]
    assert all(
        d.shape == () and d.kind is BufferKind.NEW for d in promoted.all_buffers()[len(promoted.buffers) :]
    )


def test_trmv_lower_triangular_reduction_matches_numpy():
    original = load(ROOT / "models" / "trmv_lower.te").bind(N=6)
    promoted = promote_accumulators(original)
    assert "y_acc += L[i, j] * x[j]" in str(promoted)
    inputs = random_inputs(original)
    got = assert_same_outputs(original, promoted, inputs)
    np.testing.assert_allclose(got["y"], np.tril(inputs["L"]) @ inputs["x"], rtol=1e-5, atol=1e-5)


def test_strictly_triangular_empty_rows_are_still_promoted_when_race_free():
    # Row 0 runs no iteration: the load/store pair rewrites y[0] with itself, which is
    # only this thread's element.
    original = te(
        """
        param N
        in L: f64[N, N]
        in x: f64[N]
        out y: f64[N]
        par N i { seq i j { y[i] += L[i, j] * x[j] } }
        """
    )
    promoted = promote_accumulators(original)
    assert "y_acc = 0" in str(promoted)  # y is out and nothing wrote it: its start, 0
    bound = original.bind(N=5)
    inputs = random_inputs(bound)
    got = assert_same_outputs(bound, promoted.bind(N=5), inputs)
    np.testing.assert_allclose(got["y"], np.tril(inputs["L"], -1) @ inputs["x"], rtol=1e-12)


# ----------------------------------------------------------- not promoted


@pytest.mark.parametrize(
    "text",
    [
        # the element changes with the loop index
        """
        param M, K
        in A: f32[M, K]
        out C: f32[M, K]
        par M i { seq K k { C[i, k] += A[i, k] } }
        """,
        # two different elements of C in one loop
        """
        param M, K
        in A: f32[M, K]
        out C: f32[M, 2]
        par M i { seq K k { C[i, 0] += A[i, k]; C[i, 1] += 2 * A[i, k] } }
        """,
        # one element written, another (structurally different) read
        """
        param M, K
        in A: f32[M, K]
        out C: f32[M, 2]
        par M i { seq K k { C[i, 0] += A[i, k] * C[i, 1] } }
        """,
        # a par loop inside the seq loop
        """
        param M, K
        in A: f32[M, K]
        out y: f32[M]
        out T: f32[M, 2]
        par M i { seq K k { par 2 z { T[i, z] = A[i, k] } ; y[i] += A[i, k] } }
        """,
        # only read in the loop, never written
        """
        param M, K
        in A: f32[M, K]
        out y: f32[M]
        par M i { y[i] = 1; seq K k { anchor y[i] * A[i, k] } }
        """,
        # host-level seq loop around par loops
        """
        param T, N
        inout A: f32[N]
        seq T t { par N i { A[i] += 1 } }
        """,
        # a serial kernel's own top-level loop: a load and store around it would be
        # kernels of their own
        """
        param N
        in x: f32[N]
        out s: f32
        s += x[i]
        """,
        # block-local accumulators (softmax style) are registers already
        """
        param M, N
        in X: f32[M, N]
        out y: f32[M]
        par M i { new t: f32; t = 0; seq N j { t += X[i, j] }; y[i] = t }
        """,
    ],
)
def test_nothing_to_promote_returns_an_equal_program(text):
    program = te(text)
    assert promote_accumulators(program) == program


def test_program_that_does_not_analyze_is_returned_unchanged():
    program = te(
        """
        param N, K
        in A: f32[N, K]
        out s: f32
        par N i { seq K k { s += A[i, k] } }
        """
    )
    with pytest.raises(RaceError):
        analyze(program)
    assert promote_accumulators(program) == program


def test_outer_loop_fails_but_inner_loop_is_promoted():
    promoted = promote_accumulators(
        te(
            """
            param M, K
            in A: f32[M, K]
            out C: f32[M, 2]
            par M i { seq 2 r { seq K k { C[i, r] += A[i, k] } } }
            """
        )
    )
    assert body_text(promoted) == textwrap.dedent(
        """\
        par M i {
          seq 2 r {
            new C_acc: f32
            C_acc = 0
            seq K k {
              C_acc += A[i, k]
            }
            C[i, r] = C_acc
          }
        }
        """
    )


def test_two_deep_reduction_is_promoted_once_at_the_outer_loop():
    original = te(
        """
        param M, K
        in A: f32[M, K, 3]
        in x: f32[M]
        out y: f32[M]
        par M i { seq K k { seq 3 r { y[i] += A[i, k, r] * x[i] } } }
        """
    )
    promoted = promote_accumulators(original)
    assert body_text(promoted) == textwrap.dedent(
        """\
        par M i {
          new y_acc: f32
          y_acc = 0
          seq K k {
            seq 3 r {
              y_acc += A[i, k, r] * x[i]
            }
          }
          y[i] = y_acc
        }
        """
    )
    bound = original.bind(M=3, K=4)
    assert_same_outputs(bound, promoted.bind(M=3, K=4), random_inputs(bound))


def test_serial_kernel_promotes_inside_its_top_level_loop():
    promoted = promote_accumulators(
        te(
            """
            param M, N
            in A: f32[M, N]
            out s: f32
            seq M i { seq N j { s += A[i, j] } }
            """
        )
    )
    assert body_text(promoted) == textwrap.dedent(
        """\
        seq M i {
          new s_acc: f32
          s_acc = s
          seq N j {
            s_acc += A[i, j]
          }
          s = s_acc
        }
        """
    )


def test_several_accumulators_in_one_loop_and_fresh_names():
    original = te(
        """
        param M, K
        in A: f64[M, K]
        out lo: f64[M]
        out hi: f64[M]
        out lo_acc: f64[M]
        par M i {
          lo[i] = A[i, 0]
          hi[i] = A[i, 0]
          seq K k { lo[i] min= A[i, k]; hi[i] max= A[i, k]; lo_acc[i] = lo[i] }
        }
        """
    )
    promoted = promote_accumulators(original)
    assert body_text(promoted) == textwrap.dedent(
        """\
        par M i {
          lo[i] = A[i, 0]
          hi[i] = A[i, 0]
          new lo_acc2: f64
          new hi_acc: f64
          new lo_acc_acc: f64
          lo_acc2 = lo[i]
          hi_acc = hi[i]
          lo_acc_acc = 0
          seq K k {
            lo_acc2 min= A[i, k]
            hi_acc max= A[i, k]
            lo_acc_acc = lo_acc2
          }
          lo[i] = lo_acc2
          hi[i] = hi_acc
          lo_acc[i] = lo_acc_acc
        }
        """
    )
    assert_numbered(promoted)
    bound = original.bind(M=3, K=4)
    inputs = random_inputs(bound)
    got = assert_same_outputs(bound, promoted.bind(M=3, K=4), inputs)
    np.testing.assert_array_equal(got["lo"], inputs["A"].min(1))
    np.testing.assert_array_equal(got["hi"], inputs["A"].max(1))


# ------------------------------------------------------ zero-iteration safety

RACY_IF_PROMOTED = """
in x: f32[2]
out y: f32[2]
par 2 p { seq p k { y[0] += x[k] } }
"""


def test_empty_loop_promotion_that_would_race_is_dropped():
    original = te(RACY_IF_PROMOTED)
    analyze(original)  # only p = 1 writes y[0]: race free
    # The naive promotion makes p = 0 write y[0] too (its loop is empty).
    naive = te(
        """
        in x: f32[2]
        out y: f32[2]
        par 2 p { new y_acc: f32; y_acc = y[0]; seq p k { y_acc += x[k] }; y[0] = y_acc }
        """
    )
    with pytest.raises(RaceError):
        analyze(naive)
    promoted = promote_accumulators(original)
    assert promoted == original
    analyze(promoted)


def test_empty_loop_promotion_that_would_leave_bounds_is_dropped():
    original = te(
        """
        param N
        in x: f32[N]
        out y: f32[N]
        par N i { seq i k { y[i - 1] += x[k] } }
        """
    )
    analyze(original)
    naive = te(
        """
        param N
        in x: f32[N]
        out y: f32[N]
        par N i { new y_acc: f32; y_acc = y[i - 1]; seq i k { y_acc += x[k] }; y[i - 1] = y_acc }
        """
    )
    with pytest.raises(BoundsError):
        analyze(naive)
    assert promote_accumulators(original) == original


def test_unsafe_promotion_is_dropped_and_safe_ones_kept():
    original = te(
        """
        param M, K
        in A: f32[M, K]
        in x: f32[3]
        out C: f32[M]
        out y: f32[2]
        par M i { seq K k { C[i] += A[i, k] } }
        par 2 p { seq p r { seq 3 k { y[0] += x[k] } } }
        """
    )
    promoted = promote_accumulators(original)
    # C is promoted; y[0] not around r (p = 0 would store it), but around k, which only
    # runs where r has an iteration, i.e. in thread p = 1 alone.
    assert body_text(promoted) == textwrap.dedent(
        """\
        par M i {
          new C_acc: f32
          C_acc = 0
          seq K k {
            C_acc += A[i, k]
          }
          C[i] = C_acc
        }
        par 2 p {
          seq p r {
            new y_acc: f32
            y_acc = 0
            seq 3 k {
              y_acc += x[k]
            }
            y[0] = y_acc
          }
        }
        """
    )
    analyze(promoted)
    bound = original.bind(M=2, K=3)
    assert_same_outputs(bound, promoted.bind(M=2, K=3), random_inputs(bound))


# ----------------------------------------------------------------- numbering


def test_statements_are_renumbered_in_textual_order():
    original = te(
        """
        param M, K
        in A: f32[M, K]
        out C: f32[M]
        out D: f32[M]
        par M i { C[i] = 1; seq K k { C[i] += A[i, k] }; D[i] = C[i] }
        """
    )
    assert statement_names(original) == ["S0", "S1", "S2"]
    promoted = promote_accumulators(original)
    stmts = [ctx.stmt for ctx in walk.statements(promoted)]
    assert [s.name for s in stmts] == ["S0", "S1", "S2", "S3"]
    # the store of 1 right before the loop is forwarded: the register starts at 1
    assert [str(s) for s in stmts] == [
        "C_acc = 1",
        "C_acc += A[i, k]",
        "C[i] = C_acc",
        "D[i] = C[i]",
    ]


def test_a_store_right_before_the_loop_starts_the_register_unless_it_reads_the_element():
    forwarded = te(
        """
        param M, K
        in A: f32[M, K]
        out C: f32[M]
        par M i { C[i] = A[i, 0] * 2; seq K k { C[i] += A[i, k] } }
        """
    )
    kept = te(
        """
        param M, K
        in A: f32[M, K]
        inout C: f32[M]
        par M i { C[i] = C[i] * 2; seq K k { C[i] += A[i, k] } }
        """
    )
    assert [str(c.stmt) for c in walk.statements(promote_accumulators(forwarded))] == [
        "C_acc = A[i, 0] * 2",
        "C_acc += A[i, k]",
        "C[i] = C_acc",
    ]
    assert [str(c.stmt) for c in walk.statements(promote_accumulators(kept))][:2] == [
        "C[i] = C[i] * 2",
        "C_acc = C[i]",
    ]
    # bit for bit the reference's result, also where the loop runs no iteration (K = 0 is
    # outside the sizes; K = 1 is the smallest)
    for program in (forwarded, kept):
        for sizes in ({"M": 5, "K": 7}, {"M": 3, "K": 1}):
            bound = program.bind(**sizes)
            arrays = random_inputs(bound)
            want = reference(bound, **arrays)
            got = reference(promote_accumulators(bound), **arrays)
            np.testing.assert_array_equal(got["C"], want["C"])


def test_renumber_statements_helper():
    program = te(MATMUL)
    scrambled = Program(
        program.name,
        program.params,
        program.buffers,
        (
            Loop(
                LoopKind.PAR,
                "i",
                IVar("M"),
                (
                    Assign(
                        "S7", "C", (IVar("i"), IConst(0)), AssignOp.SET, Read("A", (IVar("i"), IConst(0)))
                    ),
                    Loop(
                        LoopKind.SEQ,
                        "k",
                        IVar("K"),
                        (
                            Assign(
                                "S3",
                                "C",
                                (IVar("i"), IConst(1)),
                                AssignOp.ADD,
                                Read("A", (IVar("i"), IVar("k"))),
                            ),
                        ),
                    ),
                    Assign(
                        "S0", "C", (IVar("i"), IConst(2)), AssignOp.SET, Read("A", (IVar("i"), IConst(1)))
                    ),
                ),
            ),
        ),
    )
    assert statement_names(renumber_statements(scrambled)) == ["S0", "S1", "S2"]
    assert renumber_statements(program) == program


# ------------------------------------------------------------------ property


@st.composite
def reduction_nests(draw) -> str:
    """A random race-free nest of 2-3 par/seq loops around one reduction statement:
    constant or triangular extents (possibly empty), every par index in the target."""
    depth = draw(st.integers(2, 3))
    names = ["a", "b", "c"][:depth]
    kinds = [draw(st.sampled_from(["par", "seq"])) for _ in names]
    extents, maxima = [], []
    for m in range(depth):
        form = draw(st.sampled_from(["const", "tri", "tri1"] if m else ["const"]))
        if form == "const":
            extents.append(str(draw(st.integers(1, 5))))
            maxima.append(int(extents[-1]))
        elif form == "tri":  # empty where the outer index is 0
            extents.append(names[m - 1])
            maxima.append(max(maxima[m - 1] - 1, 0))
        else:
            extents.append(f"{names[m - 1]} + 1")
            maxima.append(maxima[m - 1])
    target = [n for n, k in zip(names, kinds) if k == "par" or draw(st.booleans())]
    op = draw(st.sampled_from(["+=", "max=", "*=", "min=", "-="]))
    init = draw(st.booleans())
    extra_read = draw(st.booleans())

    def shape(indices):
        return "[" + ", ".join(str(max(1, maxima[names.index(n)])) for n in indices) + "]"

    c = f"C[{', '.join(target)}]"
    lines = [f"in A: f64{shape(names)}", f"out C: f64{shape(target)}"]
    if init:
        lines.append(f"in B: f64{shape(target)}")
    if extra_read:
        lines.append(f"out E: f64{shape(names)}")
    inner = [f"{c} {op} A[{', '.join(names)}]" + (f" * 0.5 + {c}" if extra_read else "")]
    if extra_read:
        inner.append(f"E[{', '.join(names)}] = {c}")
    init_depth = 1 + max((names.index(n) for n in target), default=-1)
    body = inner
    for m in reversed(range(depth)):
        if init and m + 1 == init_depth:
            body = [f"{c} = B[{', '.join(target)}]"] + body
        body = [f"{kinds[m]} {extents[m]} {names[m]} {{"] + ["  " + line for line in body] + ["}"]
    if init and init_depth == 0:
        body = [f"{c} = B[]"] + body
    return "\n".join(lines + body) + "\n"


@settings(max_examples=60)
@given(text=reduction_nests(), seed=st.integers(0, 2**32 - 1))
def test_promotion_preserves_reference_results(text, seed):
    note(text)
    original = te(text, "random")
    promoted = promote_accumulators(original)
    note(str(promoted))
    assert_numbered(promoted)
    assert parse(str(promoted), name="random") == promoted
    assert_same_outputs(original, promoted, random_inputs(original, np.random.default_rng(seed)))


def test_accumulators_are_promoted_where_the_bounds_need_the_context():
    """A program whose shapes hold only under its context (``s: f32[M]`` written at ``i < N``
    with ``N <= M``) proves nothing without it: promotion must analyze under the context, in
    optimize and again when compile replays the mapping (it promoted nothing before)."""
    import polymap

    text = """
    param N
    param M
    in A: f32[M, M]
    out s: f32[M]
    par N i {
      s[i] = 0.0
      seq N k { s[i] += A[i, k] }
    }
    """
    program = te(text, "ctx")
    with pytest.raises(BoundsError):
        analyze(program)  # the context is needed
    mapping = polymap.optimize(program, context="N <= M and N >= 1")
    assert list(walk.local_buffers(mapping.program)) == ["s_acc"], mapping.program
    a = RNG.standard_normal((9, 9)).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(A=a, N=7, M=9)
    np.testing.assert_allclose(out["s"][:7], a[:7, :7].sum(axis=1), rtol=1e-5)


# ------------------------------------------------ an out buffer's start: zeros, no load


@pytest.mark.parametrize(
    ("text", "load"),
    [
        # inout: the caller's values
        (MATMUL.replace("out C", "inout C"), "C_acc = C[i, j]"),
        # an earlier kernel writes C: the load reads what it wrote
        (
            MATMUL.replace(
                "par M i { par N j { seq", "par M i { par N j { C[i, j] = 1 } }\npar M i { par N j { seq"
            ),
            "C_acc = C[i, j]",
        ),
        # a host loop runs the reduction again: its second run reads the first's result
        (
            MATMUL.replace(
                "par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } }",
                "seq 2 t { par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } } }",
            ),
            "C_acc = C[i, j]",
        ),
        # the first statement before the loop sets the element: the register starts at it
        (MATMUL.replace("par N j { seq", "par N j { C[i, j] = 2; seq"), "C_acc = 2"),
    ],
    ids=["inout", "written-before", "host-loop", "set-before"],
)
def test_a_register_loads_its_element_unless_it_is_an_out_buffer_s_untouched_zero(text, load):
    original = te(text)
    promoted = promote_accumulators(original)
    assert load in str(promoted) and "C_acc = 0" not in str(promoted)
    sizes = {"M": 3, "N": 4, "K": 5}
    bound = original.bind(**sizes)
    assert_same_outputs(bound, promoted.bind(**sizes), random_inputs(bound))


def test_an_out_buffer_nothing_wrote_starts_its_register_at_zero_and_is_never_read():
    """isl's dataflow finds no write of C before the load: C starts as zeros (an out
    buffer), so the register starts at 0 and the kernel never reads C."""
    original = te(MATMUL)
    promoted = promote_accumulators(original)
    assert "C_acc = 0" in str(promoted) and "C_acc = C[i, j]" not in str(promoted)
    model = analyze(promoted.bind(M=3, N=4, K=5))
    assert not [a for s in model.statements for a in s.accesses if a.buffer == "C" and not a.is_write]
    bound = original.bind(M=3, N=4, K=5)
    assert_same_outputs(bound, promoted.bind(M=3, N=4, K=5), random_inputs(bound))
