"""The TE language: every contract form parses to the IR it means; errors say where."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polymap import ArgumentError, parse
from polymap.errors import (
    AccessError,
    ArityError,
    DeclarationError,
    NotAffineError,
    ParseError,
    ProgramError,
    ShapeError,
    UndeclaredError,
)
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    Binary,
    BufferKind,
    Call,
    Const,
    DType,
    Fn,
    IBin,
    IConst,
    IndexOp,
    IndexValue,
    INeg,
    IVar,
    Loop,
    LoopKind,
    New,
    Read,
    ValueOp,
    fold_index,
)

CONTRACT = """
# comment to end of line
param M, N, K                    # size parameters
in    A: f32[M, K]               # input buffer
in    B: f32[K, N]
out   C: f32[M, N]               # output buffer
inout D: f32[M, N]               # read and written
new   T: f32[M, N]               # program-wide temporary
par M i {                        # parallel loop, i in [0, M)
  par N j {
    C[i, j] = 0                  # assignment
    seq K k {                    # sequential loop
      C[i, j] += A[i, k] * B[k, j]
    }
    C[i, j] = max(C[i, j] + D[i, j], 0)
  }
}
"""


def test_contract_program_parses_to_the_ir_it_means():
    program = parse(CONTRACT, name="mm")
    assert program.name == "mm"
    assert program.param_names == ("M", "N", "K")
    kinds = {b.name: (b.kind, b.dtype, tuple(map(str, b.shape))) for b in program.buffers}
    assert kinds == {
        "A": (BufferKind.IN, DType.F32, ("M", "K")),
        "B": (BufferKind.IN, DType.F32, ("K", "N")),
        "C": (BufferKind.OUT, DType.F32, ("M", "N")),
        "D": (BufferKind.INOUT, DType.F32, ("M", "N")),
        "T": (BufferKind.NEW, DType.F32, ("M", "N")),
    }
    i, j, k = IVar("i"), IVar("j"), IVar("k")
    init = Assign("S0", "C", (i, j), AssignOp.SET, Const(0))
    update = Assign(
        "S1", "C", (i, j), AssignOp.ADD, Binary(ValueOp.MUL, Read("A", (i, k)), Read("B", (k, j)))
    )
    epilogue = Assign(
        "S2",
        "C",
        (i, j),
        AssignOp.SET,
        Call(Fn.MAX, (Binary(ValueOp.ADD, Read("C", (i, j)), Read("D", (i, j))), Const(0))),
    )
    inner = Loop(
        LoopKind.PAR, "j", IVar("N"), (init, Loop(LoopKind.SEQ, "k", IVar("K"), (update,)), epilogue)
    )
    assert program.body == (Loop(LoopKind.PAR, "i", IVar("M"), (inner,)),)


@pytest.mark.parametrize("op", ["=", "+=", "-=", "*=", "max=", "min="])
def test_every_assignment_operator(op):
    program = parse(f"in X: f32[4]\nout Y: f32[4]\npar 4 i {{ Y[i] {op} X[i] }}")
    assert program.body[0].body[0].op is AssignOp(op)


def test_max_call_is_not_an_assignment_token():
    program = parse("in X: f32[4]\nout Y: f32[4]\npar 4 i { Y[i] max= max(X[i], 1) }")
    stmt = program.body[0].body[0]
    assert stmt.op is AssignOp.MAX and stmt.value == Call(Fn.MAX, (Read("X", (IVar("i"),)), Const(1)))


def test_functions_numbers_unary_minus_and_parentheses():
    program = parse(
        "in X: f64[3]\nout Y: f64[3]\n"
        "par 3 i { Y[i] = -exp(X[i]) / (log(2.5) - sqrt(abs(X[i]))) * tanh(1e-3) + min(X[i], .5) }"
    )
    text = str(program.body[0].body[0].value)
    assert text == "-exp(X[i]) / (log(2.5) - sqrt(abs(X[i]))) * tanh(0.001) + min(X[i], 0.5)"


def test_triangular_extent_and_index_value():
    program = parse("param N\nout L: i32[N, N]\npar N i { par i + 1 j { L[i, j] = i * 2 + j } }")
    outer = program.body[0]
    inner = outer.body[0]
    assert inner.extent == IBin(IndexOp.ADD, IVar("i"), IConst(1))
    stmt = inner.body[0]
    assert stmt.value == Binary(
        ValueOp.ADD, Binary(ValueOp.MUL, IndexValue(IVar("i")), Const(2)), IndexValue(IVar("j"))
    )


def test_quasi_affine_indices_floor_division_and_modulo():
    program = parse(
        "param N = 4\nin X: f32[N * N]\nout Y: f32[N * N]\npar N * N p { Y[(p % N) * N + p / N] = X[p] }"
    )
    stmt = program.body[0].body[0]
    p, n = IVar("p"), IVar("N")
    expected = IBin(
        IndexOp.ADD,
        IBin(IndexOp.MUL, IBin(IndexOp.MOD, p, n), n),
        IBin(IndexOp.FLOORDIV, p, n),
    )
    assert stmt.indices == (expected,)
    # '//' is the same floor division as '/'
    other = parse(
        "param N = 4\nin X: f32[N * N]\nout Y: f32[N * N]\npar N * N p { Y[(p % N) * N + p // N] = X[p] }"
    )
    assert other.body == program.body


def test_flat_buffer_becomes_affine_once_bound():
    program = parse(
        "param M, N\nin A: f32[M * N]\nout C: f32[M * N]\npar M i { par N j { C[i * N + j] = A[i * N + j] } }"
    )
    bound = program.bind(N=8)
    stmt = bound.body[0].body[0].body[0]
    assert str(stmt) == "C[i * 8 + j] = A[i * 8 + j]"
    assert bound.param_names == ("M",) and bound.bindings == (("N", 8),)
    assert str(bound.buffer("A").shape[0]) == "M * 8"
    assert str(bound.bind(M=2).buffer("A").shape[0]) == "16"


def test_bind_rejects_unknown_and_negative_sizes():
    program = parse("param N\nout Y: f32[N]\npar N i { Y[i] = 1 }")
    with pytest.raises(ArgumentError, match=r"no unbound size of that name.*N"):
        program.bind(M=3)
    with pytest.raises(ArgumentError, match=r"size N must be a non-negative integer, got -1"):
        program.bind(N=-1)
    with pytest.raises(ArgumentError, match=r"already bound to 4"):
        program.bind(N=4).bind(N=5)


def test_defaults_and_bind_defaults():
    program = parse("param M = 2 * 16, N\nout Y: f32[M, N]\nY[i, j] = 1")
    assert [(p.name, p.default) for p in program.params] == [("M", 32), ("N", None)]
    assert program.bind_defaults().bindings == (("M", 32),)


def test_semicolons_newlines_in_brackets_and_one_line_blocks():
    a = parse("in X: f32[4]; out Y: f32[4]; par 4 i { Y[i] = X[i]; Y[i] += 1 }")
    b = parse("in X: f32[4]\nout Y: f32[4]\npar 4 i {\n  Y[\n    i\n  ] = X[i]\n\n  Y[i] += (1\n  )\n}\n")
    assert a.body == b.body


def test_scalar_buffers_read_bare_or_with_empty_brackets():
    program = parse(
        "in alpha: f32\nin x: f32[8]\nout s: f32[]\nout z: f32[8]\n"
        "par 8 i { z[i] = alpha * x[i] + alpha[] }\ns += x[k]"
    )
    z = program.body[0].body[0]
    assert z.value == Binary(
        ValueOp.ADD, Binary(ValueOp.MUL, Read("alpha", ()), Read("x", (IVar("i"),))), Read("alpha", ())
    )
    reduction = program.body[1]
    assert reduction.kind is LoopKind.SEQ and reduction.index == "k" and reduction.extent == IConst(8)
    assert reduction.body[0] == Assign("S1", "s", (), AssignOp.ADD, Read("x", (IVar("k"),)))


def test_einsum_shorthand_is_the_explicit_nest():
    sugar = parse(
        "param M, N, K\nin A: f32[M, K]\nin B: f32[K, N]\nout C: f32[M, N]\nC[m, n] += A[m, k] * B[k, n]"
    )
    explicit = parse(
        "param M, N, K\nin A: f32[M, K]\nin B: f32[K, N]\nout C: f32[M, N]\n"
        "par M m { par N n { seq K k { C[m, n] += A[m, k] * B[k, n] } } }"
    )
    assert sugar.body == explicit.body


def test_einsum_inside_a_loop_binds_only_the_free_names():
    program = parse("param B, M, K\nin X: f32[B, M, K]\nout Y: f32[B, M]\npar B b { Y[b, m] += X[b, m, k] }")
    outer = program.body[0]
    assert outer.index == "b"
    par_m = outer.body[0]
    assert (par_m.kind, par_m.index, par_m.extent) == (LoopKind.PAR, "m", IVar("M"))
    seq_k = par_m.body[0]
    assert (seq_k.kind, seq_k.index, seq_k.extent) == (LoopKind.SEQ, "k", IVar("K"))


def test_block_local_new_is_a_statement_of_its_block():
    program = parse(
        "param N\nin X: f32[N]\nout Y: f32[N]\npar N i { new T: f32[2]; T[0] = X[i]; Y[i] = T[0] }"
    )
    body = program.body[0].body
    assert isinstance(body[0], New) and body[0].decl.name == "T" and body[0].decl.kind is BufferKind.NEW
    assert program.buffer("T").shape == (IConst(2),)
    assert [b.name for b in program.all_buffers()] == ["X", "Y", "T"]


def test_anchor_is_a_statement_with_reads():
    program = parse("in X: f32[4]\nout Y: f32[4]\npar 4 i { anchor X[i] * 2; Y[i] = X[i] }")
    anchor = program.body[0].body[0]
    assert anchor.name == "S0" and anchor.reads() == (Read("X", (IVar("i"),)),)


def test_statement_names_follow_text_order():
    program = parse("out Y: f32[4]\nout Z: f32[4]\npar 4 i { Y[i] = 1 }\npar 4 i { Z[i] = 2; Z[i] += 1 }")
    names = [program.body[0].body[0].name] + [s.name for s in program.body[1].body]
    assert names == ["S0", "S1", "S2"]


def test_printed_program_parses_back_to_itself():
    program = parse(CONTRACT + "\nout E: f32[M]\nE[i] += A[i, k] - -B[k, 0] / 3\n")
    assert parse(str(program)).body == program.body
    assert parse(str(program)) == program


# -- index expressions survive printing and parsing, whatever their shape

_leaf = st.one_of(st.integers(-9, 9).map(IConst), st.sampled_from(["i", "j", "N"]).map(IVar))


def _combine(children):
    const = st.integers(1, 7).map(IConst)
    return st.one_of(
        st.tuples(st.sampled_from([IndexOp.ADD, IndexOp.SUB]), children, children),
        st.tuples(st.just(IndexOp.MUL), children, st.integers(-5, 5).map(IConst)),
        st.tuples(st.sampled_from([IndexOp.FLOORDIV, IndexOp.MOD]), children, const),
    ).map(lambda t: fold_index(IBin(*t))) | children.map(
        lambda e: IConst(-e.value) if isinstance(e, IConst) else INeg(e)
    )


@given(st.recursive(_leaf, _combine, max_leaves=8))
def test_index_expressions_round_trip(expr):
    text = f"param N\nout Y: f32[100]\npar 4 i {{ par 4 j {{ Y[{expr}] = 1 }} }}"
    assert parse(text).body[0].body[0].body[0].indices == (expr,)


# -- errors: class, message and position


def _error(text: str, cls: type) -> str:
    with pytest.raises(cls) as info:
        parse(text, source="t.te")
    return str(info.value)


@pytest.mark.parametrize(
    "text, position, message",
    [
        ("out Y: f32[4]\npar 4 i { Y[i] = 1 +  }", "2:23", r"expected an expression but found '}'"),
        ("out Y: f32[4]\npar 4 i { Y[i = 1 }", "2:19", r"'\[' opened at 2:12 is not closed before '}'"),
        ("out Y: f32[4]\npar 4 i { Y[i] = 1\n", "3:1", r"expected '}' to close par loop 'i' opened at 2:1"),
        ("out Y: f32[4]\npar 4 { Y[0] = 1 }", "2:7", r"needs an extent and an index"),
        ("out Y: f32[4]\nY[0] = 1 $", "2:10", r"unexpected character '\$'"),
        ("out Y f32[4]", "1:7", r"expected ':' after buffer name 'Y'"),
        ("out Y: f32[4]\nY[0] 1", "2:6", r"expected an assignment"),
        ("out Y: f32[4]\npar 4 i { param Q }", "2:11", r"size parameters are declared at top level"),
        ("out Y: f32[4]\npar 4 i { in Q: f32[4] }", "2:11", r"only 'new' may appear in a block"),
        ("out Y: f32[4]\nY[0] = 1 2", "2:10", r"expected the end of the statement"),
        ("out Y: f32[4])", "1:14", r"unmatched '\)'"),
        ("out par: f32[4]", "1:5", r"'par' is a keyword"),
    ],
)
def test_syntax_errors_name_line_and_column_with_a_caret(text, position, message):
    rendered = _error(text, ParseError)
    assert rendered.startswith(f"t.te:{position}: ")
    assert re.search(message, rendered)
    # the offending line is quoted with a caret under the column
    line, col = map(int, position.split(":"))
    source_line = text.splitlines()[line - 1] if line <= len(text.splitlines()) else ""
    quoted = rendered.splitlines()
    if source_line:
        assert quoted[1].strip() == source_line.strip()
        assert quoted[2] == " " * (4 + col - 1) + "^"


@pytest.mark.parametrize(
    "text, cls, message",
    [
        (
            "in A: f8[4]",
            DeclarationError,
            r"1:7: unknown dtype 'f8' for buffer 'A': use one of f16, bf16, f32, f64, i8, u8, i32, i64, bool",
        ),
        ("in A: f32[4]\nin A: f32[4]", DeclarationError, r"'A' is declared twice"),
        ("param N\nparam N", DeclarationError, r"size 'N' is declared twice"),
        ("param N = -3", DeclarationError, r"default of size 'N' must be a non-negative integer"),
        ("out Y: f32[4]\npar 4 i { par 4 i { Y[i] = 1 } }", DeclarationError, r"loop index 'i' shadows"),
        (
            "param N\nout Y: f32[4]\npar 4 N { Y[N] = 1 }",
            DeclarationError,
            r"loop index 'N' has the name of a size",
        ),
        ("out Y: f32[4]\npar 4 i { Y[i] = Z[i] }", UndeclaredError, r"2:18: buffer 'Z' is not declared"),
        ("out Y: f32[4]\npar 4 i { Z[i] = 1 }", UndeclaredError, r"2:11: buffer 'Z' is not declared"),
        (
            "out Y: f32[4]\npar Q i { Y[i] = 1 }",
            UndeclaredError,
            r"unknown name 'Q' in the extent of loop 'i'",
        ),
        ("out Y: f32[4]\npar 4 i { Y[i] = foo(i) }", UndeclaredError, r"unknown function 'foo'"),
        ("out Y: f32[4]\npar 4 i { Y[i] = q }", UndeclaredError, r"S0 `Y\[i\] = q`: unknown name 'q'"),
        (
            "out Y: f32[4]\npar 4 i { Y[i, 0] = 1 }",
            ArityError,
            r"buffer 'Y' has 1 dimension\(s\) but Y\[i, 0\]",
        ),
        (
            "in X: f32[4, 4]\nout Y: f32[4]\npar 4 i { Y[i] = X[i] }",
            ArityError,
            r"buffer 'X' has 2 dimension",
        ),
        ("in X: f32[4, 4]\nout Y: f32[4]\npar 4 i { Y[i] = X }", ArityError, r"used without indices"),
        ("out Y: f32[4]\npar 4 i { Y[i] = max(i) }", ArityError, r"max\(\) takes 2 argument"),
        (
            "in X: f32[4]\npar 4 i { X[i] = 1 }",
            AccessError,
            r"S0 `X\[i\] = 1`: buffer 'X' is an input \('in'\)",
        ),
        ("out Y: f32[16]\npar 4 i { Y[i * i] = 1 }", NotAffineError, r"'i \* i' multiplies two loop indices"),
        (
            "out Y: f32[16]\npar 4 i { par 4 j { Y[i / j] = 1 } }",
            NotAffineError,
            r"positive constant divisor",
        ),
        ("out Y: f32[16]\npar 4 i { Y[i % 0] = 1 }", NotAffineError, r"positive constant divisor"),
        (
            "in I: i32[4]\nout Y: f32[4]\npar 4 i { Y[I[i]] = 1 }",
            ProgramError,
            r"S0 `Y\[I\[i\]\] = 1`: a write through an index read from 'I' \(a scatter\) must be an update",
        ),
        (
            "out Y: f32[4]\npar 4 i { Y[i] = 7 // 2 }",
            ProgramError,
            r"'//' is allowed in index expressions only",
        ),
        ("out Y: f32[4]\npar 4 i { Y[i + 0.5] = 1 }", NotAffineError, r"must be an integer expression"),
        (
            "in X: f32[4, 5]\nin W: f32[6]\nout Y: f32[4]\nY[i] += X[i, k] * W[k]",
            ShapeError,
            r"implicit index 'k' ranges over 5 in X\[i, k\] \(buffer 'X'\) but over 6 in W\[k\] \(buffer 'W'\)",
        ),
        (
            "in X: f32[4]\nout Y: f32[4]\nY[i] = X[i + j]",
            ShapeError,
            r"cannot infer the extent of implicit index 'j'",
        ),
        (
            "in X: f32[4, 4]\nout Y: f32[4]\nY[i] = X[i, k]",
            ProgramError,
            r"'k' appears only on the right of '='",
        ),
    ],
)
def test_program_errors_name_the_culprit(text, cls, message):
    rendered = _error(text, cls)
    assert rendered.startswith("t.te:")
    assert re.search(message, rendered), rendered


def test_errors_are_polymap_errors_and_load_names_the_file(tmp_path):
    from polymap import PolymapError, load

    path = tmp_path / "broken.te"
    path.write_text("out Y: f32[4]\npar 4 i { Y[i] = }\n")
    with pytest.raises(PolymapError, match=r"broken\.te:2:18: expected an expression"):
        load(path)
    with pytest.raises(ArgumentError, match=r"cannot read program file"):
        load(tmp_path / "missing.te")
    with pytest.raises(ArgumentError, match=r"takes the program text as a str"):
        parse(b"out Y: f32[4]")
