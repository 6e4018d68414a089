"""Conditions and selects (issue 13): ``select(cond, a, b)`` with comparisons joined by
``and``, ``or``, ``not``, and the ``inf`` and ``nan`` literals, through every stage: the
parser and its errors, validation, the reference executor (against NumPy and the scalar
oracle of ``tests/oracle.py``), the model, the emitted C on the host and NVRTC."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from everywhere import run_everywhere

import polymap
from polymap.errors import ArityError, NotAffineError, ParseError, ProgramError
from polymap.ir.flops import statement_flops
from polymap.ir.nodes import (
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    CmpOp,
    Compare,
    Const,
    DType,
    IConst,
    IVar,
    Loop,
    LoopKind,
    Program,
    Read,
    Select,
)
from polymap.ir.parse import parse
from polymap.reference import reference

ROOT = Path(__file__).resolve().parent.parent


def _statement(program: Program, *path: int):
    node = program.body[path[0]]
    for k in path[1:]:
        node = node.body[k]
    return node


# -- the language


def test_select_parses_to_a_select_of_a_condition_and_prints_back():
    text = (
        "param N = 4\nin x: f32[N]\nout y: f32[N]\n"
        "par N i { y[i] = select(not x[i] < 0 and i > 1 or x[i] == inf, x[i], -inf) }"
    )
    program = parse(text)
    stmt = _statement(program, 0, 0)
    assert isinstance(stmt.value, Select)
    # or binds loosest, then and, then not, then the comparison
    assert str(stmt.value) == "select(not x[i] < 0 and i > 1 or x[i] == inf, x[i], -inf)"
    assert stmt.value.cond.op.value == "or" and stmt.value.cond.lhs.op.value == "and"
    assert parse(str(program)) == program  # the printed text reads back as the same program
    assert stmt.value.otherwise == Const(-math.inf)


def test_nan_reads_as_a_literal_and_a_size_named_inf_stays_a_size():
    program = parse("param inf = 3\nout y: f32[inf]\npar inf i { y[i] = select(y[i] != nan, inf, nan) }")
    value = _statement(program, 0, 0).value
    assert str(value.then) == "inf" and value.then.expr == IVar("inf")  # the size, as a value
    assert isinstance(value.otherwise, Const) and math.isnan(value.otherwise.value)


@pytest.mark.parametrize(
    "body, cls, position, message",
    [
        (
            "y[x[i] > 0] = 1",
            NotAffineError,
            "4:18",
            r"a condition \('a comparison'\) cannot appear in an index",
        ),
        ("y[i > 0] = 1", NotAffineError, "4:15", r"a condition \('a comparison'\) cannot appear in an index"),
        ("y[i] = select(x[i], 1, 2)", ProgramError, "4:25", r"select's first argument must be a condition"),
        (
            "y[i] = select(i, 1, 2)",
            ProgramError,
            "4:25",
            r"or a bool value \(a read of a bool buffer, bool\(x\)\)",
        ),
        ("y[i] = select(x[i] > 0, 1)", ArityError, "4:18", r"select\(\) takes 3 arguments"),
        ("y[i] = select(0 < x[i] < 1, 1, 2)", ParseError, "4:34", r"comparisons do not chain"),
        ("y[i] == x[i]", ParseError, "4:16", r"expected an assignment"),
    ],
)
def test_a_condition_in_an_index_or_a_value_that_is_no_condition_is_an_error_at_its_position(
    body, cls, position, message
):
    text = f"param N = 4\nin x: f32[N]\nout y: f32[N]\npar N i {{ {body} }}"
    with pytest.raises(cls, match=message) as info:
        parse(text, source="t.te")
    assert f"t.te:{position}:" in str(info.value)


def test_and_or_not_are_keywords():
    with pytest.raises(ParseError, match=r"'and' is a keyword"):
        parse("out and: f32[4]")


def test_a_condition_built_in_python_where_a_value_belongs_is_rejected_by_validation():
    decls = (
        BufferDecl("x", BufferKind.IN, DType.F32, (IConst(4),)),
        BufferDecl("y", BufferKind.OUT, DType.F32, ()),
    )
    x0 = Read("x", (IVar("i"),))
    bad = Assign("S0", "y", (), AssignOp.MAX, Compare(CmpOp.GT, x0, Const(0)))
    with pytest.raises(ProgramError, match=r"the condition 'x\[i\] > 0' is used as a value"):
        polymap.analyze(Program("p", (), decls, (Loop(LoopKind.SEQ, "i", IConst(4), (bad,)),)))


def test_a_select_costs_one_operation_and_each_comparison_one():
    program = parse(
        "out y: f32[4]\nin x: f32[4]\npar 4 i { y[i] = select(x[i] > 0 and x[i] < 1, x[i] * 2, 0) }"
    )
    assert statement_flops(_statement(program, 0, 0)) == 1 + 3 + 1  # select; >, <, and; *


# -- what it computes


def _run_everywhere(text: str, **arrays) -> dict:
    """The program's outputs from the reference, checked against the scalar oracle and the
    emitted code on the host (and compiled by NVRTC)."""
    runs, _ = run_everywhere(parse(text).bind_defaults(), arrays)
    want = runs["reference"]
    for name, value in want.items():
        np.testing.assert_array_equal(
            value, runs["oracle"][name], err_msg=f"reference against the oracle: {name}"
        )
        np.testing.assert_array_equal(
            runs["host"][name], value, err_msg=f"host run against the reference: {name}"
        )
    return want


def test_select_with_and_or_not_computes_what_numpy_computes():
    x = np.array([-2.0, -0.5, 0.0, 0.25, 0.5, 1.0, 3.0, np.nan, np.inf, -np.inf, 7.0, -7.0], np.float32)
    text = (
        "param N = 12\nin x: f32[N]\nout y: f32[N]\nout k: i32[N]\n"
        "par N i {\n"
        "  y[i] = select(x[i] >= 0 and not x[i] > 1 or x[i] == -inf, x[i] * 2, select(x[i] != x[i], 0, -1))\n"
        "  k[i] = select(i >= 9 or x[i] < -1, i, -i)\n"
        "}"
    )
    got = _run_everywhere(text, x=x)
    inner = np.where(x != x, 0, -1).astype(np.float32)
    want = np.where(((x >= 0) & ~(x > 1)) | (x == -np.inf), x * 2, inner)
    np.testing.assert_array_equal(got["y"], want)
    i = np.arange(12)
    np.testing.assert_array_equal(got["k"], np.where((i >= 9) | (x < -1), i, -i))


def test_a_select_computes_only_its_chosen_operand_so_an_i32_division_there_never_faults():
    # d[i] = 0 where the condition fails: the division is in the operand not taken, and in
    # the right side of an `and` whose left side is false (C short-circuits it)
    n = np.array([7, -7, 9, 4, 0], np.int32)
    d = np.array([2, 0, -2, 0, 3], np.int32)
    text = (
        "param N = 5\nin n: i32[N]\nin d: i32[N]\nout q: i32[N]\nout big: i32[N]\n"
        "par N i {\n"
        "  q[i] = select(d[i] != 0, n[i] / d[i], 0)\n"
        "  big[i] = select(d[i] != 0 and n[i] / d[i] > 1, 1, 0)\n"
        "}"
    )
    got = _run_everywhere(text, n=n, d=d)
    np.testing.assert_array_equal(got["q"], [3, 0, -4, 0, 0])  # C truncates toward zero
    np.testing.assert_array_equal(got["big"], [1, 0, 0, 0, 0])


def test_the_operands_of_a_select_are_promoted_together_and_the_result_converted_on_store():
    x = np.array([1.5, -2.5, 3.75], np.float32)
    text = "param N = 3\nin x: f32[N]\nout k: i32[N]\npar N i { k[i] = select(x[i] > 0, x[i], i) }"
    got = _run_everywhere(text, x=x)
    np.testing.assert_array_equal(got["k"], [1, 1, 3])  # 1.5 -> 1, i = 1, 3.75 -> 3


def test_the_emitted_select_is_cs_conditional_operator_with_polymaps_infinity():
    program = parse(
        "param N = 4\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = select(x[i] > 0 or i == 2, x[i], -inf) }"
    )
    source = polymap.compile(program).source
    kernel = source[source.index("__global__") :]
    statement = next(line for line in kernel.splitlines() if " ? " in line)
    assert "> 0.0f || " in statement and statement.endswith(" : -PM_INF;"), statement


# -- the models that use it


@pytest.mark.parametrize("sizes", [{"M": 37, "N": 29}, {"M": 8, "N": 1}])
def test_argmax_rows_is_numpys_argmax_first_of_equals_and_rows_of_minus_infinity(sizes):
    program = polymap.load(ROOT / "models/argmax_rows.te").bind(**sizes)
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, size=(sizes["M"], sizes["N"])).astype(np.float32)  # many ties
    x[1] = -np.inf
    got = reference(program, X=x)["best"]
    np.testing.assert_array_equal(got, np.argmax(x, axis=1))
    np.testing.assert_array_equal(polymap.compile(program).run_host(X=x)["best"], got)


def test_argmax_written_as_three_reductions_is_argmax_rows_for_every_input():
    """models/argmax_rows_spread.te gives argmax_rows.te's position on rows of ties, -inf,
    +inf and NaN anywhere (where argmax_rows' position freezes at the first NaN), in the
    reference and on the host, where its three scans run on the lanes of a block."""
    written = polymap.load(ROOT / "models/argmax_rows.te").bind(M=64, N=45)
    spread = polymap.load(ROOT / "models/argmax_rows_spread.te").bind(M=64, N=45)
    rng = np.random.default_rng(11)
    x = rng.integers(-3, 4, size=(64, 45)).astype(np.float32)  # many ties
    specials = np.array([np.nan, np.inf, -np.inf], np.float32)
    where = rng.random(x.shape) < 0.08
    x[where] = rng.choice(specials, where.sum())
    x[0], x[1], x[2, :7] = -np.inf, np.nan, -np.inf  # a row of -inf, of NaN, -inf then a NaN
    x[2, 7] = np.nan
    x[3], x[3, 5], x[3, 9] = 1, np.nan, 2  # a larger value after the first NaN: not taken
    expected = reference(written, X=x)["best"]
    assert expected[3] == 0 and expected[1] == 0 and expected[2] == 0
    np.testing.assert_array_equal(reference(spread, X=x)["best"], expected)
    kernel = polymap.compile(spread)
    assert kernel.mapping.kernels[0].lanes > 1, kernel.mapping.report()
    np.testing.assert_array_equal(kernel.run_host(X=x)["best"], expected)


def test_masked_softmax_is_the_softmax_of_each_rows_unmasked_prefix():
    program = polymap.load(ROOT / "models/masked_softmax.te").bind(N=33)
    x = np.random.default_rng(3).standard_normal((33, 33)).astype(np.float32)
    got = reference(program, X=x)["Y"]
    masked = np.where(np.tril(np.ones((33, 33), bool)), x.astype(np.float64), -np.inf)
    e = np.exp(masked - masked.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-8)
    assert np.all(got[np.triu_indices(33, 1)] == 0)  # exactly zero above the diagonal
    np.testing.assert_allclose(polymap.compile(program).run_host(X=x)["Y"], got, rtol=1e-5, atol=1e-7)


# ------------------------------------------- conditions as values, bool values as conditions


def test_a_condition_as_a_value_is_one_where_it_holds_and_zero_where_not():
    """As in C and Python: counted (``+=`` of a comparison), multiplied (a ReLU's mask), and
    converted; the printed program writes it as the select it is and reads back the same."""
    n = 50
    rng = np.random.default_rng(7)
    k = rng.integers(-10, 10, n).astype(np.int32)
    x = rng.standard_normal(n).astype(np.float32)
    program = polymap.parse(
        f"param N = {n}\nin k: i32[N]\nin x: f32[N]\nout m: i32[N]\nout y: f32[N]\nout c: i32[1]\n"
        "par N i {\n  m[i] = (k[i] > 0) + (k[i] >= 5 and i < 40) + i32(not x[i] < 0)\n"
        "  y[i] = x[i] * (x[i] > 0)\n}\nseq N i { c[0] += x[i] > 0 }",
        name="truth",
    ).bind_defaults()
    stmt = program.body[0].body[0]
    assert str(stmt.value).startswith("select(k[i] > 0, 1, 0) + select(k[i] >= 5 and i < 40, 1, 0)")
    assert polymap.parse(str(program)).body == program.body
    runs, _ = run_everywhere(program, {"k": k, "x": x})
    idx = np.arange(n)
    want_m = (k > 0).astype(np.int32) + ((k >= 5) & (idx < 40)) + (x >= 0)
    for name, run in runs.items():
        np.testing.assert_array_equal(run["m"], want_m, err_msg=name)
        np.testing.assert_array_equal(run["y"], x * (x > 0), err_msg=name)
        np.testing.assert_array_equal(run["c"], [(x > 0).sum()], err_msg=name)


def test_a_bool_read_or_conversion_stands_as_a_condition_that_holds_where_it_is_not_zero():
    """A mask buffer in an if on data and in a select, a 0-d flag, ``bool(k[i])``."""
    n = 40
    rng = np.random.default_rng(8)
    b = rng.integers(0, 2, n).astype(np.bool_)
    k = rng.integers(-2, 3, n).astype(np.int32)
    x = rng.standard_normal(n).astype(np.float32)
    program = polymap.parse(
        f"param N = {n}\nin b: bool[N]\nin flag: bool\nin k: i32[N]\nin x: f32[N]\ninout y: f32[N]\n"
        "out m: i32[N]\npar N i {\n  if b[i] and not flag { y[i] = 2 * x[i] } else { y[i] = -1 }\n"
        "  m[i] = select(bool(k[i]) or b[i], k[i], 7)\n}",
        name="masks",
    ).bind_defaults()
    assert "if b[i] != 0 and not flag != 0 {" in str(program)
    assert polymap.parse(str(program)).body == program.body
    for flag in (False, True):
        inputs = {"b": b, "flag": np.array(flag), "k": k, "x": x, "y": np.zeros(n, np.float32)}
        runs, _ = run_everywhere(program, inputs)
        want_y = np.where(b & (not flag), 2 * x, np.float32(-1))
        for name, run in runs.items():
            np.testing.assert_array_equal(run["y"], want_y, err_msg=f"{name}, flag {flag}")
            np.testing.assert_array_equal(run["m"], np.where((k != 0) | b, k, 7), err_msg=name)


@pytest.mark.parametrize(
    "body, message",
    [
        ("if x[i] { y[i] = 1 }", r"or a bool value \(a read of a bool buffer, bool\(x\)\)"),
        ("y[i] = select(k[i], 1, 2)", r"select's first argument must be a condition"),
        ("if not x[i] { y[i] = 1 }", r"7:10: 'if' takes a condition"),
    ],
)
def test_only_a_bool_value_stands_as_a_condition(body, message):
    text = f"param N = 4\nin x: f32[N]\nin k: i32[N]\nin b: bool[N]\nout y: f32[N]\npar N i {{\n  {body}\n}}"
    with pytest.raises(polymap.errors.PolymapError, match=message) as info:
        polymap.parse(text, source="t.te")
    assert "t.te:7:" in str(info.value)


def test_a_selects_condition_does_not_type_the_value_and_a_comparison_types_its_own_literals():
    """An index past 2^24 chosen by a float comparison stayed an f32 on its way to an i32
    (the statement's type took in the condition's f32 read): 16777217 became 16777216. And
    a comparison's literals take the type of what it reads: ``k[i] == 16777217`` in i32,
    ``d[i] > 0.1`` in f64, whatever the statement computes in."""
    x = np.array([1, 0, 0, 0], np.float32)
    d = np.array([0.1, 0.10000000001, 0.2, 0.3])
    k = np.array([16777217, 16777217, 16777216, 16777217], np.int32)
    program = polymap.parse(
        "param N = 4\nin x: f32[N]\nin d: f64[N]\nin k: i32[N]\ninout best: i32[1]\nout c: i32[N]\n"
        "seq N i { best[0] = select(x[i] > 0, i + 16777217, best[0]) }\n"
        "par N i { c[i] = select(d[i] > 0.1 and k[i] == 16777217, 1, 2) }",
        name="typed",
    ).bind_defaults()
    runs, _ = run_everywhere(program, {"x": x, "d": d, "k": k, "best": np.zeros(1, np.int32)})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["best"], [16777217], err_msg=name)
        np.testing.assert_array_equal(run["c"], [2, 1, 2, 1], err_msg=name)


def test_a_count_of_a_float_comparison_into_an_integer_is_an_integer_reduction_and_is_split():
    """``s[0] += x[i] > 0`` computes in i32 (its value is 1 or 0): an exact integer sum in
    any order, so the optimizer may split it over threads (it stayed one thread while the
    statement computed in f32)."""
    n = 1 << 20
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    program = polymap.parse(
        f"param N = {n}\nin x: f32[N]\nout s: i32[1]\nseq N i {{ s[0] += x[i] > 0 }}", name="count"
    ).bind_defaults()
    kernel = polymap.compile(program)
    assert len(kernel.mapping.kernels) > 1 or kernel.mapping.kernels[0].lanes > 1
    np.testing.assert_array_equal(kernel.run_host(x=x)["s"], [(x > 0).sum()])


def test_a_nested_selects_condition_does_not_type_the_comparison_around_it():
    """A review's finding: ``select(x[i] > 0, k[i], 0) == 16777217`` compares two i32 values,
    but the f32 read that only chooses between them made the comparison f32 (16777216
    matched)."""
    x = np.array([1, 1, -1, 1], np.float32)
    k = np.array([16777217, 16777216, 16777217, 0], np.int32)
    program = polymap.parse(
        "param N = 4\nin x: f32[N]\nin k: i32[N]\nout c: i32[N]\n"
        "par N i { c[i] = select(select(x[i] > 0, k[i], 0) == 16777217, 1, 2) }",
        name="nested",
    ).bind_defaults()
    runs, _ = run_everywhere(program, {"x": x, "k": k})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["c"], [1, 2, 2, 2], err_msg=name)
