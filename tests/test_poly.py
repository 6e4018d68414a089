"""The polyhedral model: domains, accesses, schedule, dependences, race and bounds proofs.

Every expected set or relation below is written by hand in isl syntax (or counted by a
closed formula / a plain Python loop), never computed by the code under test."""

from __future__ import annotations

import math
import re

import islpy as isl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polymap.errors import (
    ArgumentError,
    BoundsError,
    NotAffineError,
    PolymapError,
    RaceError,
    UninitializedReadError,
)
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    Const,
    DType,
    IBin,
    IConst,
    IndexOp,
    IndexValue,
    INeg,
    IVar,
    Loop,
    LoopKind,
    Param,
    Program,
)
from polymap.ir.parse import parse
from polymap.poly.deps import DepKind
from polymap.poly.isl_text import IslNames, NonAffine, isl_expr
from polymap.poly.model import analyze

MATMUL = """
param M, N, K
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i {
  par N j {
    seq K k {
      C[i, j] += A[i, k] * B[k, j]
    }
  }
}
"""

MATMUL_INIT = """
param M, N, K
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i {
  par N j {
    C[i, j] = 0
    seq K k {
      C[i, j] += A[i, k] * B[k, j]
    }
  }
}
"""

TIME_LOOP = """
param T, N
inout A: f32[N]
out   B: f32[N]
seq T t {
  par N i { B[i] = A[i] }
  par N i { A[i] = B[i] }
}
"""

TEMPORARIES = """
param N, M
in  A: f32[N, M]
out B: f32[N]
par N i {
  new t: f32[M]
  new acc: f32
  acc = 0
  par M j { t[j] = A[i, j] * 2 }
  seq M j { acc += t[j] }
  B[i] = acc
}
"""


def S(text: str) -> isl.Set:
    return isl.Set(text)


def M(text: str) -> isl.Map:
    return isl.Map(text)


def U(text: str) -> isl.UnionMap:
    return isl.UnionMap(text)


def equal(a, b) -> bool:
    return a.is_equal(b)


# ------------------------------------------------------------------ domains, accesses


def test_matmul_domain_accesses_schedule():
    model = analyze(parse(MATMUL, name="matmul"))
    assert model.params == ("M", "N", "K")
    assert equal(model.context, S("[M, N, K] -> { : M >= 1 and N >= 1 and K >= 1 }"))
    (s0,) = model.statements
    dom = "0 <= i < M and 0 <= j < N and 0 <= k < K and M >= 1 and N >= 1 and K >= 1"
    assert s0.name == "S0"
    assert equal(s0.domain, S(f"[M, N, K] -> {{ S0[i, j, k] : {dom} }}"))
    (w,) = s0.writes
    assert (w.buffer, w.text, w.is_write) == ("C", "C[i, j]", True)
    assert equal(w.relation, M(f"[M, N, K] -> {{ S0[i, j, k] -> C[i, j] : {dom} }}"))
    assert [r.text for r in s0.reads] == ["A[i, k]", "B[k, j]", "C[i, j]"]  # operands, then the target
    assert equal(s0.reads[0].relation, M(f"[M, N, K] -> {{ S0[i, j, k] -> A[i, k] : {dom} }}"))
    assert equal(s0.reads[1].relation, M(f"[M, N, K] -> {{ S0[i, j, k] -> B[k, j] : {dom} }}"))
    assert equal(model.schedule, U(f"[M, N, K] -> {{ S0[i, j, k] -> [0, i, 0, j, 0, k, 0] : {dom} }}"))
    assert [str(loop) for loop in model.race_free] == ["par loop 'i' at 6:1", "par loop 'j' at 7:3"]


def test_triangular_domain_and_counts():
    src = "param N\nout C: f32[N, N]\npar N i {\n  seq i + 1 j { C[i, j] = 1 }\n}\n"
    model = analyze(parse(src))
    assert equal(model.statement("S0").domain, S("[N] -> { S0[i, j] : 0 <= i < N and 0 <= j <= i }"))
    for n in (1, 2, 5, 17):
        bound = analyze(parse(src).bind(N=n))
        assert bound.instance_count("S0") == n * (n + 1) // 2
        assert equal(bound.statement("S0").domain, S(f"{{ S0[i, j] : 0 <= i < {n} and 0 <= j <= i }}"))


def test_tetrahedral_count():
    src = "param N\nout C: f32[N]\npar N i { seq i + 1 j { seq j + 1 k { C[i] += 1 } } }"
    for n in (1, 3, 4, 10):
        assert analyze(parse(src).bind(N=n)).instance_count("S0") == n * (n + 1) * (n + 2) // 6


def test_a_deep_triangular_chain_is_counted_in_linear_steps():
    """Four triangular loops: C(n + 3, 4) points. At n = 5000 that is 2.6e13, which the
    counter reaches by prefix sums per level (enumerating the nest did not finish); at small
    n isl's own count of the domain agrees, and so does a clipped extent (``min``)."""
    src = "param N\nout C: f32[N]\npar N a { seq a + 1 b { seq b + 1 c { seq c + 1 d { C[a] += 1 } } } }"
    model = analyze(parse(src).bind(N=5000))
    assert model.instance_count("S0") == math.comb(5000 + 3, 4)
    clipped = src.replace("seq c + 1 d", "seq min(c + 1, 3) d")
    for text in (src, clipped):
        small = analyze(parse(text).bind(N=7))
        assert small.instance_count("S0") == small.statement("S0").domain.count_val().to_python()


def test_imperfect_nest_schedule_and_counts():
    model = analyze(parse(MATMUL_INIT))
    s0, s1 = model.statements
    p = "M >= 1 and N >= 1 and K >= 1"
    assert equal(s0.domain, S(f"[M, N, K] -> {{ S0[i, j] : 0 <= i < M and 0 <= j < N and {p} }}"))
    assert equal(
        s1.domain, S(f"[M, N, K] -> {{ S1[i, j, k] : 0 <= i < M and 0 <= j < N and 0 <= k < K and {p} }}")
    )
    expected = U(
        f"[M, N, K] -> {{ S0[i, j] -> [0, i, 0, j, 0, 0, 0] : 0 <= i < M and 0 <= j < N and {p};"
        f" S1[i, j, k] -> [0, i, 0, j, 1, k, 0] : 0 <= i < M and 0 <= j < N and 0 <= k < K and {p} }}"
    )
    assert equal(model.schedule, expected)
    bound = analyze(parse(MATMUL_INIT).bind(M=2, N=3, K=4))
    assert bound.instance_count("S0") == 6
    assert bound.instance_count("S1") == 24
    assert bound.total_instances() == 30


def test_time_loop_schedule():
    model = analyze(parse(TIME_LOOP))
    d = "0 <= t < T and 0 <= i < N and T >= 1 and N >= 1"
    expected = U(f"[T, N] -> {{ S0[t, i] -> [0, t, 0, i, 0] : {d}; S1[t, i] -> [0, t, 1, i, 0] : {d} }}")
    assert equal(model.schedule, expected)


def test_quasi_affine_index_after_binding():
    src = "param N\nin X: f32[N * N]\nout Y: f32[N * N]\npar N * N p {\n  Y[(p % N) * N + p / N] = X[p]\n}\n"
    with pytest.raises(NotAffineError) as err:
        analyze(parse(src))
    assert err.value.params == ("N",)
    model = analyze(parse(src).bind(N=4))
    (s0,) = model.statements
    assert equal(s0.domain, S("{ S0[p] : 0 <= p < 16 }"))
    assert equal(s0.writes[0].relation, M("{ S0[p] -> Y[4 * (p mod 4) + floor(p / 4)] : 0 <= p < 16 }"))
    assert equal(
        s0.writes[0].relation,
        M("{ S0[p] -> Y[y] : 0 <= p < 16 and exists a, b : p = 4a + b and 0 <= b < 4 and y = 4b + a }"),
    )
    # The transposition is a permutation of Y: injective and onto its 16 elements.
    assert s0.writes[0].relation.is_injective()
    assert equal(s0.writes[0].relation.range(), S("{ Y[y] : 0 <= y < 16 }"))


def test_local_buffer_is_expanded_per_iteration():
    model = analyze(parse(TEMPORARIES))
    t = next(b for b in model.buffers if b.name == "t")
    acc = next(b for b in model.buffers if b.name == "acc")
    assert t.is_local and t.owner == ("i",)
    assert equal(t.in_bounds, S("[N, M] -> { t[i, a] : 0 <= a < M and N >= 1 and M >= 1 }"))
    assert equal(acc.in_bounds, S("[N, M] -> { acc[i] : N >= 1 and M >= 1 }"))
    s0, s1, s2, _ = model.statements
    p = "N >= 1 and M >= 1"
    assert equal(s0.writes[0].relation, M(f"[N, M] -> {{ S0[i] -> acc[i] : 0 <= i < N and {p} }}"))
    assert equal(
        s1.writes[0].relation, M(f"[N, M] -> {{ S1[i, j] -> t[i, j] : 0 <= i < N and 0 <= j < M and {p} }}")
    )
    assert equal(
        s2.reads[0].relation, M(f"[N, M] -> {{ S2[i, j] -> t[i, j] : 0 <= i < N and 0 <= j < M and {p} }}")
    )
    assert [str(loop) for loop in model.race_free] == ["par loop 'i' at 5:1", "par loop 'j' at 9:3"]
    # Through t, S1 feeds S2 only within one iteration of i.
    from_s1 = model.dependences.flow.intersect_domain(isl.UnionSet("[N, M] -> { S1[i, j] }"))
    assert equal(from_s1, U(f"[N, M] -> {{ S1[i, j] -> S2[i, j] : 0 <= i < N and 0 <= j < M and {p} }}"))


def test_program_wide_temporary_races_where_a_local_does_not():
    shared = TEMPORARIES.replace("  new t: f32[M]\n", "").replace(
        "out B: f32[N]\n", "out B: f32[N]\nnew t: f32[M]\n"
    )
    with pytest.raises(RaceError, match=r"par loop 'i' at 6:1.*writes t\[j\]"):
        analyze(parse(shared))


# ----------------------------------------------------------------------- dependences


def test_time_loop_dependences():
    deps = analyze(parse(TIME_LOOP)).dependences
    d = "0 <= t < T and 0 <= t2 < T and 0 <= i < N and T >= 1 and N >= 1"
    flow = U(
        f"[T, N] -> {{ S0[t, i] -> S1[t2, i] : t2 >= t and {d}; S1[t, i] -> S0[t2, i] : t2 > t and {d} }}"
    )
    anti = U(
        f"[T, N] -> {{ S0[t, i] -> S1[t2, i] : t2 >= t and {d}; S1[t, i] -> S0[t2, i] : t2 > t and {d} }}"
    )
    output = U(
        f"[T, N] -> {{ S0[t, i] -> S0[t2, i] : t2 > t and {d}; S1[t, i] -> S1[t2, i] : t2 > t and {d} }}"
    )
    assert equal(deps.flow, flow)
    assert equal(deps.anti, anti)
    assert equal(deps.output, output)
    described = {(dep.kind, dep.source, dep.sink, dep.buffer) for dep in deps.items}
    assert described == {
        (DepKind.FLOW, "S0", "S1", "B"),
        (DepKind.FLOW, "S1", "S0", "A"),
        (DepKind.ANTI, "S0", "S1", "A"),
        (DepKind.ANTI, "S1", "S0", "B"),
        (DepKind.OUTPUT, "S0", "S0", "B"),
        (DepKind.OUTPUT, "S1", "S1", "A"),
    }
    (b_flow,) = [dep for dep in deps.items if dep.kind is DepKind.FLOW and dep.buffer == "B"]
    assert equal(b_flow.relation, M(f"[T, N] -> {{ S0[t, i] -> S1[t2, i] : t2 >= t and {d} }}"))


def test_matmul_with_init_dependences():
    deps = analyze(parse(MATMUL_INIT)).dependences
    p = "0 <= i < M and 0 <= j < N and M >= 1 and N >= 1 and K >= 1"
    init_to_update = f"S0[i, j] -> S1[i, j, k] : 0 <= k < K and {p}"
    update_to_update = f"S1[i, j, k] -> S1[i, j, k2] : 0 <= k < k2 < K and {p}"
    assert equal(deps.flow, U(f"[M, N, K] -> {{ {init_to_update}; {update_to_update} }}"))
    assert equal(deps.anti, U(f"[M, N, K] -> {{ {update_to_update} }}"))
    assert equal(deps.output, U(f"[M, N, K] -> {{ {init_to_update}; {update_to_update} }}"))
    assert {(d.kind, d.source, d.sink, d.buffer) for d in deps.between("S0", "S1")} == {
        (DepKind.FLOW, "S0", "S1", "C"),
        (DepKind.OUTPUT, "S0", "S1", "C"),
    }


def test_memory_based_flow_keeps_every_earlier_writer():
    # Value-based analysis would keep only the last write (t = 2); memory-based keeps all.
    src = "out A: f32[1]\nout B: f32[3]\nseq 3 t { A[0] = t }\nseq 3 u { B[u] = A[0] }\n"
    deps = analyze(parse(src)).dependences
    assert equal(deps.flow, U("{ S0[t] -> S1[u] : 0 <= t < 3 and 0 <= u < 3 }"))
    assert equal(deps.output, U("{ S0[t] -> S0[t2] : 0 <= t < t2 < 3 }"))


# ----------------------------------------------------------------------------- races


def test_race_reduction_into_one_element():
    src = "param N\nin A: f32[N]\nout s: f32[1]\npar N i { s[0] += A[i] }\n"
    with pytest.raises(RaceError) as err:
        analyze(parse(src))
    msg = str(err.value)
    assert re.search(r"par loop 'i' at 4:1", msg)
    assert re.search(r"S0 `s\[0\] \+= A\[i\]` writes s\[0\]", msg)
    assert re.search(r"with N = 2: i = 0 and i = 1 both write s\[0\]", msg)
    assert re.search(r"<string>:4:11", msg) and "\n              ^" in msg  # file:line:col and caret


def test_race_shift_names_both_accesses():
    src = "param N\ninout A: f32[N + 1]\npar N i { A[i + 1] = A[i] }\n"
    with pytest.raises(RaceError) as err:
        analyze(parse(src))
    msg = str(err.value)
    assert re.search(r"par loop 'i' at 3:1", msg)
    assert re.search(r"S0 `A\[i \+ 1\] = A\[i\]` writes A\[i \+ 1\] and S0 `.*` reads A\[i\]", msg)
    assert re.search(r"i = 0 writes A\[1\] and i = 1 reads A\[1\]", msg)


def test_race_between_two_statements_symbolic():
    src = "param N\ninout A: f32[N]\nout B: f32[N]\npar N i {\n  B[i] = A[i]\n  A[N - 1 - i] = 2\n}\n"
    with pytest.raises(
        RaceError, match=r"S0 `B\[i\] = A\[i\]` reads A\[i\] and S1 `A\[N - 1 - i\] = 2` writes"
    ):
        analyze(parse(src))


def test_race_only_for_large_sizes_depends_on_context():
    src = "param N\nout A: f32[N]\npar N i { A[i % 2] = 1 }\n"
    with pytest.raises(RaceError, match=r"with N = 3: i = 0 and i = 2 both write A\[0\]"):
        analyze(parse(src))
    model = analyze(parse(src), context="N <= 2")
    assert [loop.index for loop in model.race_free] == ["i"]
    assert analyze(parse(src).bind(N=2)).race_free
    with pytest.raises(RaceError):
        analyze(parse(src).bind(N=3))


def test_race_in_inner_par_loop_only():
    src = "param N, M\nin A: f32[N, M]\nout B: f32[N]\npar N i {\n  par M j { B[i] = A[i, j] }\n}\n"
    with pytest.raises(
        RaceError,
        match=r"par loop 'j' at 5:3.*with N = 1, M = 2, at i = 0: j = 0 and j = 1 both write B\[0\]",
    ):
        analyze(parse(src))


def test_race_across_a_seq_loop_inside_par():
    src = "param N, M\nout A: f32[M]\npar N i { seq M j { A[j] = i } }\n"
    with pytest.raises(
        RaceError, match=r"par loop 'i' at 3:1.*i = 0, j = 0 and i = 1, j = 0 both write A\[0\]"
    ):
        analyze(parse(src))


def test_identical_sibling_loops_are_told_apart():
    # The two loops differ only in their body; the second one races. A value-equal pair
    # of loops must not be confused: the error names the second one by its position.
    src = "param N\nout A: f32[N]\nout B: f32[N]\npar N i { A[i] = 1 }\npar N i { B[0] = A[i] }\n"
    with pytest.raises(RaceError, match=r"par loop 'i' at 5:1"):
        analyze(parse(src))
    twins = "param N\nout A: f32[N]\npar N i { A[i] = 1 }\npar N i { A[i] = 1 }\n"
    model = analyze(parse(twins))
    assert [loop.position for loop in model.race_free] == [(0,), (1,)]
    assert [loop.statements for loop in model.race_free] == [("S0",), ("S1",)]


def test_no_race_in_legal_programs():
    for src in (MATMUL, MATMUL_INIT, TIME_LOOP, TEMPORARIES):
        assert analyze(parse(src)).race_free
    seq_reduction = "param N\nin A: f32[N]\nout s: f32[1]\nseq N i { s[0] += A[i] }\n"
    assert analyze(parse(seq_reduction)).race_free == ()
    # Legal only because both accesses are in the same iteration of t: the check must
    # compare iterations of i within one t, not across ts.
    wavefront = "param T, N\nout A: f32[T + N]\nseq T t { par N i { A[t + i] += 1 } }\n"
    assert [loop.index for loop in analyze(parse(wavefront)).race_free] == ["i"]
    syrk = "param N, M\nin A: f32[N, M]\ninout C: f32[N, N]\npar N i { par i + 1 j { seq M k { C[i, j] += A[i, k] * A[j, k] } } }"
    assert [loop.index for loop in analyze(parse(syrk)).race_free] == ["i", "j"]


# ---------------------------------------------------------------------------- bounds


def test_bounds_error_names_access_shape_and_witness():
    src = "param N\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i + 1] }\n"
    with pytest.raises(BoundsError) as err:
        analyze(parse(src))
    msg = str(err.value)
    assert re.search(r"S0 `B\[i\] = A\[i \+ 1\]` reads A\[i \+ 1\]", msg)
    assert "in A: f32[N]" in msg
    assert re.search(r"with N = 1: i = 0 reads A\[1\]", msg)
    assert "<string>:4:18" in msg


def test_in_bounds_programs():
    ok = "param N\nin A: f32[N + 1]\nout B: f32[N]\npar N i { B[i] = A[i + 1] }\n"
    analyze(parse(ok))
    tri = "param N\nout C: f32[N, N]\npar N i { seq i + 1 j { C[i, j] = 1 } }\n"
    analyze(parse(tri))
    with pytest.raises(BoundsError, match=r"with N = 1: i = 0, j = 0 writes C\[0, 1\]"):
        analyze(parse(tri.replace("C[i, j] = 1", "C[i, j + 1] = 1")))


def test_bounds_of_local_buffer_and_anchor():
    src = "param N\nin A: f32[N]\nout B: f32[N]\npar N i {\n  new t: f32[2]\n  t[i % 3] = A[i]\n  B[i] = t[0]\n}\n"
    with pytest.raises(
        BoundsError, match=r"writes t\[i % 3\] outside the declared shape of `new t: f32\[2\]`"
    ):
        analyze(parse(src))
    # in bounds, but at an odd i the read of t[0] finds nothing written (t is fresh per i)
    with pytest.raises(UninitializedReadError, match=r"with N = 2, at i = 1: it reads t\[0\]"):
        analyze(parse(src.replace("i % 3", "i % 2")))
    analyze(parse(src.replace("i % 3", "i % 2").replace("t[0]", "t[i % 2]")))
    anchor = "param N\nin A: f32[N]\npar N i { anchor A[i + 1] }\n"
    with pytest.raises(BoundsError, match=r"reads A\[i \+ 1\]"):
        analyze(parse(anchor))


def test_bounds_hold_for_every_size_in_context():
    # A[2 * i] fits in f32[N] only when N is small enough to leave no i with 2i >= N... never
    # for N >= 2; a context cannot save it, but a bigger buffer can.
    src = "param N\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[2 * i] }\n"
    with pytest.raises(BoundsError, match=r"with N = 2: i = 1 reads A\[2\]"):
        analyze(parse(src), context="N >= 1")
    analyze(parse(src), context="N <= 1")
    analyze(parse(src.replace("in A: f32[N]", "in A: f32[2 * N]")))


# ------------------------------------------------------------------------ affinity


def _program(body, buffers, params=("N",)):
    return Program("hand", tuple(Param(p) for p in params), buffers, body)


def _vec(name, shape, kind=BufferKind.OUT):
    return BufferDecl(name, kind, DType.F32, shape)


def test_not_affine_square_of_index():
    i = IVar("i")
    body = (
        Loop(
            LoopKind.PAR,
            "i",
            IVar("N"),
            (Assign("S0", "x", (IBin(IndexOp.MUL, i, i),), AssignOp.SET, Const(1.0)),),
        ),
    )
    with pytest.raises(NotAffineError, match=r"S0 `x\[i \* i\] = 1.0`.*i \* i") as err:
        analyze(_program(body, (_vec("x", (IVar("N"),)),)))
    assert err.value.params == ()


def test_not_affine_index_times_size():
    src = "param N\nout x: f32[64]\npar N i { x[i * N] = 1 }\n"
    with pytest.raises(NotAffineError) as err:
        analyze(parse(src))
    assert err.value.params == ("N",)
    assert re.search(r"S0 `x\[i \* N\] = 1`", str(err.value))
    assert re.search(r"bind N to a number \(Program.bind\(N=\.\.\.\) or --size N=\.\.\.\)", str(err.value))
    assert "<string>:3:11" in str(err.value)
    model = analyze(parse(src).bind(N=8))
    assert equal(model.statements[0].writes[0].relation, M("{ S0[i] -> x[8i] : 0 <= i < 8 }"))


def test_not_affine_extent_and_modulo_by_size():
    src = "param N\nout x: f32[N, N]\npar N i { par i * N j { x[i, 0] = 1 } }\n"
    with pytest.raises(NotAffineError, match=r"extent of loop 'j'.*bind N") as err:
        analyze(parse(src))
    assert err.value.params == ("N",)
    two = "param N, M\nout x: f32[N]\nseq N i { x[i % M] = 1 }\n"
    with pytest.raises(NotAffineError) as err:
        analyze(parse(two))
    assert err.value.params == ("M",)
    analyze(parse(two).bind(M=4), context="N >= 4")


# ------------------------------------------------------------------ context, counts


def test_context_is_parsed_and_checked():
    src = "param N\nout A: f32[N]\npar N i { A[i] = 1 }\n"
    model = analyze(parse(src), context="N >= 256 and N mod 32 = 0")
    assert equal(model.context, S("[N] -> { : N >= 256 and exists e : N = 32e }"))
    for bad, pattern in (
        ("N >= ", "cannot read context"),
        ("M >= 1", "'M', which is not a size"),
        ("N >= 3 and N <= 2", "admits no sizes"),
        ("{ : N > 0 }", "constraints only"),
    ):
        with pytest.raises(ArgumentError, match=pattern):
            analyze(parse(src), context=bad)
    bound = parse("param N, M\nout A: f32[N]\npar N i { A[i] = 1 }\n").bind(M=8)
    assert equal(analyze(bound, context="M = 8 and N >= 4").context, S("[N] -> { : N >= 4 }"))
    with pytest.raises(ArgumentError, match="bound: M = 8"):
        analyze(bound, context="M = 7")


def test_instance_count_needs_bound_sizes():
    model = analyze(parse(MATMUL))
    with pytest.raises(ArgumentError, match="M, N, K are symbolic"):
        model.instance_count("S0")
    with pytest.raises(ArgumentError, match="no statement 'S9'"):
        analyze(parse(MATMUL).bind(M=1, N=1, K=1)).statement("S9")


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    shape=st.lists(
        st.sampled_from(["N", "2", "i + 1", "N - i", "j + 1", "(i + j) / 2 + 1"]), min_size=1, max_size=3
    ),
)
def test_instance_count_matches_enumeration_and_isl(n, shape):
    # Nest loops whose extents may refer to outer indices; count with plain Python loops.
    names = ["i", "j", "k"]
    extents = []
    for depth, ext in enumerate(shape):
        used = set(re.findall(r"[a-z]", ext))
        if not used <= set(names[:depth]):
            ext = "N"
        extents.append(ext)
    src = "param N\nout x: f32[1]\n"
    for name, ext in zip(names, extents):
        src += f"seq {ext} {name} {{\n"
    src += "x[0] += 1\n" + "}\n" * len(extents)

    def brute(depth, env):
        if depth == len(extents):
            return 1
        ext = eval(extents[depth].replace("/", "//"), {}, {**env, "N": n})
        return sum(brute(depth + 1, {**env, names[depth]: v}) for v in range(max(0, ext)))

    model = analyze(parse(src).bind(N=n))
    expected = brute(0, {})
    assert model.instance_count("S0") == expected
    assert model.statements[0].domain.count_val().to_python() == expected


# ------------------------------------------------------------------ isl names, text


def test_isl_keywords_are_renamed():
    names = IslNames()
    assert names["max"] == "max_"
    assert names["Floor"] == "Floor_"
    assert names["N"] == "N" and names["N"] == "N"
    assert names.fresh("N") == "N_"
    assert names.fresh("N") == "N_1"
    assert names.user("max_") == "max"
    assert len({names[x] for x in ("and", "and_", "or")}) == 3


def test_keyword_names_in_a_program():
    # A size 'mod', a buffer 'floor' and a loop index 'and' are all legal user names.
    mod, and_ = IVar("mod"), IVar("and")
    body = (
        Loop(LoopKind.PAR, "and", mod, (Assign("S0", "floor", (and_,), AssignOp.SET, IndexValue(and_)),)),
    )
    model = analyze(_program(body, (_vec("floor", (mod,)),), params=("mod",)))
    assert equal(model.statements[0].domain, S("[mod_] -> { S0[and_] : 0 <= and_ < mod_ }"))
    assert "floor_" in model.describe()
    with pytest.raises(RaceError, match=r"par loop 'and'"):
        bad = (
            Loop(LoopKind.PAR, "and", mod, (Assign("S0", "floor", (IConst(0),), AssignOp.SET, Const(1)),)),
        )
        analyze(_program(bad, (_vec("floor", (mod,)),), params=("mod",)))


def test_isl_expr_forms():
    names = {"i": "i", "N": "N"}
    i = IVar("i")
    assert isl_expr(IBin(IndexOp.MUL, IConst(3), IBin(IndexOp.ADD, i, IConst(1))), names) == "3*((i) + (1))"
    assert isl_expr(IBin(IndexOp.FLOORDIV, i, IConst(4)), names) == "floor((i)/4)"
    assert isl_expr(IBin(IndexOp.MOD, i, IConst(4)), names) == "(i) mod 4"
    with pytest.raises(NonAffine) as err:
        isl_expr(IBin(IndexOp.MUL, i, IVar("N")), names, params=("N",))
    assert err.value.params == ("N",)
    with pytest.raises(NonAffine):
        isl_expr(IBin(IndexOp.MOD, i, IConst(0)), names)


def _exprs():
    leaf = st.one_of(st.integers(-7, 7).map(IConst), st.just(IVar("i")), st.just(IVar("j")))

    def grow(sub):
        const = st.integers(-4, 4).map(IConst)
        return st.one_of(
            st.builds(INeg, sub),
            st.builds(IBin, st.sampled_from([IndexOp.ADD, IndexOp.SUB]), sub, sub),
            st.builds(IBin, st.just(IndexOp.MUL), sub, const),
            st.builds(IBin, st.just(IndexOp.MUL), const, sub),
            st.builds(
                IBin, st.sampled_from([IndexOp.FLOORDIV, IndexOp.MOD]), sub, st.integers(1, 5).map(IConst)
            ),
        )

    return st.recursive(leaf, grow, max_leaves=6)


def _py(expr, env):
    """An independent evaluator: Python's // and % floor like isl's floor and mod."""
    if isinstance(expr, IConst):
        return expr.value
    if isinstance(expr, IVar):
        return env[expr.name]
    if isinstance(expr, INeg):
        return -_py(expr.operand, env)
    a, b = _py(expr.lhs, env), _py(expr.rhs, env)
    return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else None, "%": a % b if b else None}[
        expr.op.value
    ]


@settings(max_examples=60, deadline=None)
@given(expr=_exprs())
def test_isl_expr_means_what_python_computes(expr):
    text = isl_expr(expr, {"i": "i", "j": "j"})
    relation = M(f"{{ [i, j] -> [{text}] : -4 <= i <= 4 and -3 <= j <= 3 }}")
    for i in (-4, -1, 0, 3):
        for j in (-3, 0, 2):
            image = relation.intersect_domain(S(f"{{ [{i}, {j}] }}")).range()
            assert equal(image, S(f"{{ [{_py(expr, {'i': i, 'j': j})}] }}")), (str(expr), text, i, j)


# ------------------------------------------------------------------------- printing


def test_describe_lists_everything():
    text = analyze(parse(MATMUL_INIT, name="mm")).describe()
    assert "program mm" in text
    assert re.search(r"S1 `C\[i, j\] \+= A\[i, k\] \* B\[k, j\]`", text)
    assert "domain: { S1[i, j, k] : 0 <= i < M and 0 <= j < N and 0 <= k < K }" in text
    assert "write C[i, j]: { S0[i, j] -> C[i, j] }" in text
    assert re.search(r"flow S0 -> S1 on C: ", text)
    assert "par loop 'i' at 6:1 (S0, S1)" in text
    assert str(analyze(parse(MATMUL_INIT, name="mm"))) == text


def test_errors_are_polymap_errors_not_isl():
    with pytest.raises(PolymapError):
        analyze(parse("param N\nout A: f32[N]\npar N i { A[i] = 1 }\n"), context="N >= and")
