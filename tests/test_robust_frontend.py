"""The front end never crashes: deep nesting, huge literals and misused entry points give a
PolymapError that says what is wrong (issue 14, items 8 and 10), never a Python exception."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import polymap
from polymap.errors import ArgumentError, ParseError, PolymapError, ProgramError, RangeError
from polymap.ir.nodes import (
    MAX_EXPR_NESTING,
    MAX_LOOP_NESTING,
    MAX_RANK,
    Assign,
    AssignOp,
    Binary,
    BufferDecl,
    BufferKind,
    DType,
    IConst,
    IVar,
    Loop,
    LoopKind,
    Program,
    Read,
    ValueOp,
)
from polymap.ir.validate import validate

HEAD = "in x: f32[4]\nout y: f32[4]\n"
X = np.arange(1, 5, dtype=np.float32)


def par(value: str) -> str:
    return HEAD + f"par 4 i {{ y[i] = {value} }}\n"


def nested_loops(depth: int, body: str, *, kind: str = "seq") -> str:
    for k in reversed(range(depth)):
        body = f"{kind} 1 l{k} {{\n{body}\n}}"
    return body


# -------------------------------------------------------------------- item 8: depth


# The reproducers: each raised RecursionError before.
@pytest.mark.parametrize(
    "text, col",
    [
        (par("-" * 1000 + "x[i]"), 18 + MAX_EXPR_NESTING),  # the first sign past the limit
        (par(" + ".join(["x[i]"] * 1500)), None),
        (par("(" * 330 + "x[i]" + ")" * 330), 18 + MAX_EXPR_NESTING),
        (HEAD + par("max(" * 200 + "x[i]" + ", 1)" * 200), None),
    ],
    ids=["1000 signs", "1500-term sum", "330 parentheses", "200 nested calls"],
)
def test_deep_expression_is_a_parse_error_with_its_position(text, col):
    with pytest.raises(ParseError, match=r"nested too deeply: more than 100 levels") as info:
        polymap.parse(text)
    assert info.value.loc is not None and info.value.loc.line >= 3
    if col is not None:
        assert info.value.loc.col == col


def test_deep_expression_error_points_at_the_operator_that_crosses_the_limit():
    # Each term is MAX - 1 levels high (calls around a read of x[i]): the first '+' makes
    # MAX levels, the second crosses the limit. The parser stops there, without parsing the
    # 1500 terms after it (checking the height of every subtree again made this take seconds).
    term = "exp(" * (MAX_EXPR_NESTING - 3) + "x[i]" + ")" * (MAX_EXPR_NESTING - 3)
    text = par(" + ".join([term] * 1500))
    with pytest.raises(ParseError, match="nested too deeply") as info:
        polymap.parse(text)
    second_plus = text.index("+", text.index("+") + 1)
    assert info.value.loc.col == second_plus - text.index("par") + 1


def test_deep_loop_nest_is_a_parse_error_at_the_loop_past_the_limit():
    text = HEAD + nested_loops(300, "y[0] = x[0]")
    with pytest.raises(ParseError, match=rf"loops nest more than {MAX_LOOP_NESTING} deep") as info:
        polymap.parse(text)
    # Line 3 opens loop l0; the first loop past the limit is l{MAX}.
    assert str(info.value.loc) == f"{3 + MAX_LOOP_NESTING}:1"


def deepest_sum(depth_left: int) -> str:
    # y[i] = x[i] + ... : n terms nest n - 1 operators, then the read, then its index.
    return " + ".join(["x[i]"] * (depth_left - 1))


@pytest.mark.parametrize(
    "value, expected",
    [
        # The deepest accepted forms of each kind of nesting, run through the whole pipeline.
        (deepest_sum(MAX_EXPR_NESTING), X * (MAX_EXPR_NESTING - 1)),
        ("-" * (MAX_EXPR_NESTING - 2) + "x[i]", X),  # an even number of signs
        ("(" * (MAX_EXPR_NESTING - 1) + "x[i]" + ")" * (MAX_EXPR_NESTING - 1), X),
        ("x[" + "(" * (MAX_EXPR_NESTING - 2) + "i" + ")" * (MAX_EXPR_NESTING - 2) + "]", X),
    ],
    ids=["sum", "signs", "parentheses", "index parentheses"],
)
def test_deepest_accepted_expression_runs_through_analyze_and_reference(value, expected):
    program = polymap.parse(par(value))
    polymap.analyze(program)
    out = polymap.reference(program, x=X)["y"]
    np.testing.assert_array_equal(out, expected.astype(np.float32))


@pytest.mark.parametrize(
    "value",
    [deepest_sum(MAX_EXPR_NESTING + 1), "-" * MAX_EXPR_NESTING + "x[i]", "(" * 100 + "x[i]" + ")" * 100],
    ids=["sum", "signs", "parentheses"],
)
def test_one_level_past_the_deepest_accepted_expression_is_rejected(value):
    with pytest.raises(ParseError, match="nested too deeply"):
        polymap.parse(par(value))


def test_deepest_loop_nest_with_deepest_expression_runs_through_analyze_and_reference():
    body = "y[0] = " + " + ".join(["x[0]"] * (MAX_EXPR_NESTING - 1))
    program = polymap.parse(HEAD + nested_loops(MAX_LOOP_NESTING, body))
    polymap.analyze(program)
    out = polymap.reference(program, x=X)["y"]
    assert out[0] == np.float32(MAX_EXPR_NESTING - 1) * X[0]


def test_deepest_accepted_expression_compiles_and_runs_on_the_host():
    program = polymap.parse(par(deepest_sum(MAX_EXPR_NESTING)))
    kernel = polymap.compile(program)
    out = kernel.run_host(x=X)["y"]
    np.testing.assert_array_equal(out, X * np.float32(MAX_EXPR_NESTING - 1))


def test_programs_built_in_python_are_held_to_the_same_limits():
    # Python-built trees skip the parser: validation and analyze check them without recursing.
    i = IVar("i")
    value = Read("x", (i,))
    for _ in range(3000):
        value = Binary(ValueOp.ADD, value, Read("x", (i,)))
    decls = (
        BufferDecl("x", BufferKind.IN, DType.F32, (IConst(4),)),
        BufferDecl("y", BufferKind.OUT, DType.F32, (IConst(4),)),
    )
    body = (Loop(LoopKind.PAR, "i", IConst(4), (Assign("S0", "y", (i,), AssignOp.SET, value),)),)
    deep = Program("deep", (), decls, body)
    with pytest.raises(ProgramError, match="S0: an expression nests more than 100 levels"):
        validate(deep)
    with pytest.raises(ProgramError, match="S0: an expression nests more than 100 levels"):
        polymap.analyze(deep)


def test_buffer_of_too_many_dimensions_is_a_parse_error_at_its_shape():
    # 300 dimensions took analyze 24 s and the reference raised NumPy's ValueError.
    text = f"in x: f32[{', '.join(['2'] * 300)}]\nout y: f32[]\ny[] = x[{', '.join(['1'] * 300)}]\n"
    expected = rf"buffer 'x' has 300 dimensions; polymap allows at most {MAX_RANK}"
    with pytest.raises(ParseError, match=expected) as info:
        polymap.parse(text)
    assert str(info.value.loc) == "1:10"


def test_deepest_loop_nest_around_the_largest_local_buffer_runs_through_the_reference():
    # The reference holds a local buffer with one axis per enclosing loop: the two limits
    # together stay within NumPy's limit on index arrays.
    zeros = ", ".join(["0"] * MAX_RANK)
    body = f"new t: f32[{', '.join(['1'] * MAX_RANK)}]\nt[{zeros}] = x[0] * 3\ny[0] = t[{zeros}]"
    text = "in x: f32[1]\nout y: f32[1]\n" + nested_loops(MAX_LOOP_NESTING, body, kind="par")
    program = polymap.parse(text)
    polymap.analyze(program)
    assert polymap.reference(program, x=np.full(1, 2, np.float32))["y"].tolist() == [6.0]


def test_einsum_implicit_loops_are_held_to_the_loop_limit():
    # Implicit loops do not appear in the text: validation counts them.
    names = [f"a{k}" for k in range(MAX_RANK)]
    shape = ", ".join(["2"] * MAX_RANK)
    text = f"in x: f32[{shape}]\nout y: f32[{shape}]\n" + nested_loops(
        MAX_LOOP_NESTING - MAX_RANK + 1, f"y[{', '.join(names)}] = x[{', '.join(names)}]"
    )
    with pytest.raises(ProgramError, match=rf"nests more than {MAX_LOOP_NESTING} deep"):
        polymap.parse(text)


def test_python_built_loop_nest_past_the_limit_is_a_program_error():
    body: tuple = (Assign("S0", "y", (IConst(0),), AssignOp.SET, Read("x", (IConst(0),))),)
    for k in range(2000):
        body = (Loop(LoopKind.SEQ, f"l{k}", IConst(1), body),)
    decls = (
        BufferDecl("x", BufferKind.IN, DType.F32, (IConst(1),)),
        BufferDecl("y", BufferKind.OUT, DType.F32, (IConst(1),)),
    )
    deep = Program("deep", (), decls, body)
    for check in (validate, polymap.analyze):
        with pytest.raises(ProgramError, match=rf"nests more than {MAX_LOOP_NESTING} deep"):
            check(deep)


# ----------------------------------------------------------------- item 8: literals


def test_literal_of_thousands_of_digits_is_a_parse_error():
    digits = "7" * 5000  # past Python's 4300-digit limit for int(str)
    expected = r"integer literal 7777777777\.\.\.7777777777 is too large: it has 5000 digits"
    with pytest.raises(ParseError, match=expected) as info:
        polymap.parse(par(digits))
    assert str(info.value.loc) == "3:18"


@pytest.mark.parametrize(
    "literal",
    [str(2**64), str(2**63)],
)
def test_integer_literal_past_64_bits_is_rejected_at_its_position(literal):
    text = "in x: i32[4]\nout y: i32[4]\n" + f"par 4 i {{ y[i] = x[i] + {literal} }}\n"
    with pytest.raises(RangeError, match=rf"integer literal {literal} does not fit in 64 bits") as info:
        polymap.parse(text)
    assert str(info.value.loc) == "3:25"


@pytest.mark.parametrize("literal", ["2147483648", "3000000000", "-2147483649", "3e10"])
def test_i32_literal_outside_i32_is_rejected_with_its_position(literal):
    text = "in x: i32[4]\nout y: i32[4]\n" + f"par 4 i {{ y[i] = x[i] * {literal} }}\n"
    shown = re.escape(repr(float(literal)) if "e" in literal else literal)
    with pytest.raises(RangeError, match=rf"S0: the literal {shown} does not fit in i32") as info:
        polymap.parse(text)
    assert str(info.value.loc) == "3:25"


def test_i32_literal_at_the_ends_of_i32_is_accepted():
    text = (
        "in x: i32[2]\nout y: i32[2]\npar 2 i { y[i] = x[i] * 0 + 2147483647 - (i * 0) }\n"
        "out z: i32[]\nz[] = -2147483648\n"
    )
    program = polymap.parse(text)
    out = polymap.reference(program, x=np.zeros(2, np.int32))
    assert out["y"].tolist() == [2147483647, 2147483647] and int(out["z"]) == -(2**31)


def test_large_integer_literal_in_a_float_statement_is_accepted():
    program = polymap.parse(par("x[i] * 3000000000"))
    out = polymap.reference(program, x=X)["y"]
    np.testing.assert_array_equal(out, X * np.float32(3e9))


def test_float_literal_past_f64_is_rejected():
    with pytest.raises(RangeError, match=r"the number 1e999 is too large for f64"):
        polymap.parse(par("x[i] * 1e999"))


@pytest.mark.parametrize(
    "index, folded",
    [("i * 9223372036854775808", None), ("i + (4611686018427387904 * 4)", str(2**64))],
)
def test_index_constant_past_64_bits_is_rejected(index, folded):
    with pytest.raises(RangeError, match="does not fit in 64 bits") as info:
        polymap.parse(HEAD + f"par 4 i {{ y[i] = x[{index}] }}\n")
    if folded:
        assert folded in str(info.value)


def test_binding_a_size_that_folds_past_64_bits_is_rejected():
    program = polymap.parse("param N\nin x: f32[N * N]\nout y: f32[]\ny[] = x[0]\n")
    with pytest.raises(RangeError, match=r"index constant 1208925819614629174706176 .* N = 1099511627776"):
        program.bind(N=2**40)
    with pytest.raises(ArgumentError, match="does not fit in 64 bits"):
        program.bind(N=2**64)


def test_every_error_above_is_a_polymap_error():
    # The classes the tests above expect belong to the one error family.
    assert issubclass(RangeError, ProgramError) and issubclass(ParseError, PolymapError)


# --------------------------------------------------------- item 10: entry point misuse

_TEXT = "param M\nin x: f32[M]\nout y: f32[M]\npar M i { y[i] = x[i] }\n"


def _program() -> Program:
    return polymap.parse(_TEXT)


# (call, what the message must say was expected); every call misuses one argument.
MISUSE = [
    ("parse(3)", lambda: polymap.parse(3), r"parse\(\) takes the program text as a str, got int"),
    ("parse(None)", lambda: polymap.parse(None), r"program text as a str, got NoneType"),
    ("parse(bytes)", lambda: polymap.parse(_TEXT.encode()), r"program text as a str, got bytes"),
    ("parse(Path)", lambda: polymap.parse(Path("a.te")), r"use polymap.load\(path\)"),
    ("parse(name=3)", lambda: polymap.parse(_TEXT, name=3), r"takes name= as a str, got int"),
    ("parse(source=3)", lambda: polymap.parse(_TEXT, source=3), r"takes source= as a str, got int"),
    (
        "load(3)",
        lambda: polymap.load(3),
        r"load\(\) takes the path of a .te file as a str or a Path, got int",
    ),
    ("load(None)", lambda: polymap.load(None), r"as a str or a Path, got NoneType"),
    ("load(directory)", lambda: polymap.load("."), r"cannot read program file '\.'"),
    ("load(NUL)", lambda: polymap.load("a\x00b.te"), r"cannot read program file"),
    (
        "analyze('text')",
        lambda: polymap.analyze(_TEXT),
        r"analyze\(\) takes a polymap Program .*got str \(parse the text first",
    ),
    ("analyze(None)", lambda: polymap.analyze(None), r"analyze\(\) takes a polymap Program .*got NoneType"),
    (
        "analyze(context=3)",
        lambda: polymap.analyze(_program(), context=3),
        r"takes the context as a str of isl constraints .*got int",
    ),
    ("compile(None)", lambda: polymap.compile(None), r"compile\(\) takes a polymap Program .*got NoneType"),
    ("compile('text')", lambda: polymap.compile(_TEXT), r"compile\(\) takes a polymap Program .*got str"),
    (
        "compile(mapping=3)",
        lambda: polymap.compile(_program().bind(M=8), 3),
        r"mapping must be a polymap Mapping",
    ),
    ("compile(target=3)", lambda: polymap.compile(_program().bind(M=8), target=3), r"a GPU target is a name"),
    # optimize and verify reach analyze's check first (its message names analyze()).
    ("optimize(None)", lambda: polymap.optimize(None), r"takes a polymap Program .*got NoneType"),
    ("verify(None)", lambda: polymap.verify(None, ()), r"takes a polymap Program .*got NoneType"),
    (
        "reference(None)",
        lambda: polymap.reference(None),
        r"reference\(\) takes a polymap Program .*got NoneType",
    ),
    (
        "reference('text')",
        lambda: polymap.reference(_TEXT),
        r"reference\(\) takes a polymap Program .*got str",
    ),
    ("reference(x=3)", lambda: polymap.reference(_program().bind(M=4), x=3), r"input 'x'"),
    ("bind(M='x')", lambda: _program().bind(M="x"), r"size M must be a non-negative integer, got 'x'"),
    ("bind(M=-1)", lambda: _program().bind(M=-1), r"size M must be a non-negative integer, got -1"),
    ("bind(M=1.5)", lambda: _program().bind(M=1.5), r"non-negative integer, got 1.5"),
    ("bind(M=True)", lambda: _program().bind(M=True), r"non-negative integer, got True"),
    ("bind(M=None)", lambda: _program().bind(M=None), r"non-negative integer, got None"),
    ("bind(M=2**64)", lambda: _program().bind(M=2**64), r"does not fit in 64 bits"),
    (
        "bind(nonexistent=3)",
        lambda: _program().bind(nonexistent=3),
        r"cannot bind size 'nonexistent': .* its sizes are M",
    ),
    ("bind(M twice)", lambda: _program().bind(M=3).bind(M=4), r"already bound to 3"),
]


@pytest.mark.parametrize("call, fn, expected", MISUSE, ids=[m[0] for m in MISUSE])
def test_misused_entry_point_raises_an_argument_error_saying_what_was_expected(call, fn, expected):
    with pytest.raises(ArgumentError, match=expected):
        fn()


# ------------------------------------------------------- item 10: names of C macros

# Each name is a macro (object-like or function-like) of the host headers or of NVRTC, a
# C keyword or a CUDA builtin; used as a size, a buffer or a loop index they used to be
# expanded by the preprocessor and break the compile.
HOSTILE = """\
param SIZE_MAX, INT32_MAX
in M_PI_2: f32[SIZE_MAX, INT32_MAX]
in NULL: f32[INT32_MAX]
in _GNU_SOURCE: f32[SIZE_MAX]
out EOF: f32[SIZE_MAX]
out FLT_EPSILON: i32[SIZE_MAX]
out assert: f32[SIZE_MAX]
par SIZE_MAX int {
  seq INT32_MAX threadIdx {
    EOF[int] += M_PI_2[int, threadIdx] * NULL[threadIdx]
  }
  FLT_EPSILON[int] = int
  par 1 offsetof {
    assert[int + offsetof] = _GNU_SOURCE[int] * 2 + EOF[int]
  }
}
"""


def test_program_named_like_c_macros_runs_on_the_host_as_the_reference_and_compiles_with_nvrtc():
    program = polymap.parse(HOSTILE).bind(SIZE_MAX=33, INT32_MAX=7)
    rng = np.random.default_rng(14)
    inputs = {
        "M_PI_2": rng.standard_normal((33, 7)).astype(np.float32),
        "NULL": rng.standard_normal(7).astype(np.float32),
        "_GNU_SOURCE": rng.standard_normal(33).astype(np.float32),
    }
    expected = polymap.reference(program, **inputs)
    kernel = polymap.compile(program)
    got = kernel.run_host(**inputs)
    np.testing.assert_array_equal(got["FLT_EPSILON"], np.arange(33, dtype=np.int32))
    for name in ("EOF", "assert"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert ".entry" in kernel.ptx()


def test_checked_in_macro_list_covers_what_the_compilers_define_and_every_macro_is_renamed():
    from derive_c_macros import _plain, host_macros, nvrtc_macros

    from polymap.codegen import cmacros
    from polymap.codegen.cnames import CNames

    host, _ = host_macros()
    nvrtc, _ = nvrtc_macros(host)
    hint = "the compilers define macros missing from polymap/codegen/cmacros.py: run tests/derive_c_macros.py"
    assert _plain(host) <= cmacros.HOST, (hint, sorted(_plain(host) - cmacros.HOST))
    assert _plain(nvrtc) <= cmacros.NVRTC, (hint, sorted(_plain(nvrtc) - cmacros.NVRTC))
    macros = host | nvrtc
    assert {"SIZE_MAX", "INT32_MAX", "M_PI_2", "EOF", "NULL", "offsetof", "assert", "va_start"} <= macros
    for name in sorted(macros):
        names = CNames()
        given = names[name]
        assert given != name and given not in macros, (name, given)


@pytest.mark.parametrize("name", ["sinf", "powf", "erff", "floorf", "atomicMax"])
def test_a_buffer_named_like_a_function_the_kernels_call_is_renamed(name):
    """The emitted code calls sinf, powf, erff, floorf and (for a gather's fault) atomicMax:
    a buffer of that name would shadow the function. It is renamed, and the program runs."""
    import numpy as np

    import polymap

    program = polymap.parse(
        f"param N = 8\nin x: f32[N]\nin {name}: f32\nin ids: i32[N]\nout y: f32[N]\n"
        f"par N i {{ y[i] = sin(x[i]) + pow(x[i], 2.0) + erf(x[i]) + floor(x[i]) + x[ids[i]] + {name} }}"
    )
    x = np.linspace(0.1, 0.9, 8, dtype=np.float32)
    inputs = {"x": x, name: np.float32(0.5), "ids": np.arange(8, dtype=np.int32)[::-1].copy()}
    kernel = polymap.compile(program)
    np.testing.assert_allclose(
        kernel.run_host(**inputs)["y"], polymap.reference(program, **inputs)["y"], rtol=1e-6
    )
