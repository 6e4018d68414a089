"""Bitwise operations on integer values (issue 13): ``& | ^ << >> ~``. Each program is run by
the reference, the oracle and the host emulation (compiled by NVRTC too) against values
written here with Python's integers; misuse is a located error. The typing rule under test:
a bitwise operation computes in the promotion of its operands with each literal counted as
i32, and its literals and index values take that type instead of the statement's."""

from __future__ import annotations

import numpy as np
import pytest
from everywhere import run_everywhere

from polymap.codegen.cexpr import literal
from polymap.errors import NotAffineError, ParseError, ProgramError, RangeError
from polymap.ir.nodes import Binary, Const, DType, IndexValue, Read, ValueOp
from polymap.ir.parse import parse

RNG = np.random.default_rng(13)


def _wrap(value: int, bits: int) -> int:
    """Two's complement of ``bits`` bits, written here (not taken from polymap)."""
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _shift(op: str, a: int, b: int, bits: int) -> int:
    """The documented semantics: a count outside 0..bits-1 gives 0, or the sign for >>."""
    if not 0 <= b < bits:
        return -1 if op == ">>" and a < 0 else 0
    return _wrap(a << b, bits) if op == "<<" else a >> b


def _value(program, stmt: int = 0):
    return program.body[0].body[stmt].value


def test_the_operators_bind_as_in_python_loosest_first_and_below_arithmetic():
    program = parse(
        "param N = 4\nin k: i32[N]\nout m: i32[N]\npar N i { m[i] = k[i] | k[i] ^ k[i] & k[i] << 2 + 1 }"
    )
    k = Read("k", (program.body[0].body[0].indices[0],))
    # k | (k ^ (k & (k << (2 + 1))))
    shift = Binary(ValueOp.SHL, k, Binary(ValueOp.ADD, Const(2), Const(1)))
    want = Binary(ValueOp.BITOR, k, Binary(ValueOp.BITXOR, k, Binary(ValueOp.BITAND, k, shift)))
    assert _value(program) == want


def test_a_comparison_binds_looser_than_a_bitwise_operation():
    program = parse(
        "param N = 4\nin k: i32[N]\nout m: i32[N]\npar N i { m[i] = select(k[i] & 1 == 0, 1, 2) }"
    )
    cond = _value(program).cond
    assert isinstance(cond.lhs, Binary) and cond.lhs.op is ValueOp.BITAND and cond.rhs == Const(0)


def test_invert_is_xor_with_minus_one_and_the_printed_program_parses_back():
    text = (
        "param N = 4\nin k: i32[N]\nout m: i32[N]\npar N i { m[i] = ~k[i] << 3 ^ (k[i] | 5) & k[i] >> i % 3 }"
    )
    program = parse(text)
    assert _value(program).lhs.lhs == Binary(ValueOp.BITXOR, Read("k", (_index_i(program),)), Const(-1))
    again = parse(str(program))
    assert _value(again) == _value(program)


def _index_i(program):
    return program.body[0].body[0].indices[0]


SHIFT_COUNTS = np.array([-1, 0, 1, 3, 30, 31, 32, 40, -40], np.int32)


@pytest.mark.parametrize("op", ["<<", ">>"])
def test_i32_shifts_by_every_kind_of_count_agree_everywhere(op):
    """Counts below 0 and from 32 up, which C leaves undefined, on negative values too."""
    n = len(SHIFT_COUNTS) * 4
    a = np.array([1, -1, -123456789, 2**31 - 1] * len(SHIFT_COUNTS), np.int32)
    b = np.repeat(SHIFT_COUNTS, 4)
    program = parse(
        f"param N = {n}\nin a: i32[N]\nin b: i32[N]\nout m: i32[N]\npar N i {{ m[i] = a[i] {op} b[i] }}",
        name="shifts",
    ).bind_defaults()
    runs, kernel = run_everywhere(program, {"a": a, "b": b})
    want = np.array([_shift(op, int(x), int(y), 32) for x, y in zip(a, b)], np.int32)
    for name, run in runs.items():
        np.testing.assert_array_equal(run["m"], want, err_msg=name)
    assert f"pm_sh{'l' if op == '<<' else 'r'}(" in kernel.source


def test_i64_shifts_and_the_bitwise_operators_agree_everywhere():
    n = 64
    a = RNG.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    b = RNG.integers(-8, 72, n).astype(np.int64)
    c = RNG.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    program = parse(
        f"param N = {n}\nin a: i64[N]\nin b: i64[N]\nin c: i64[N]\nout l: i64[N]\nout r: i64[N]\n"
        "out x: i64[N]\npar N i {\n  l[i] = a[i] << b[i]\n  r[i] = a[i] >> b[i]\n"
        "  x[i] = (a[i] & c[i]) ^ (~a[i] | c[i])\n}",
        name="wide",
    ).bind_defaults()
    runs, _ = run_everywhere(program, {"a": a, "b": b, "c": c})
    want_l = [_shift("<<", int(p), int(q), 64) for p, q in zip(a, b)]
    want_r = [_shift(">>", int(p), int(q), 64) for p, q in zip(a, b)]
    want_x = [_wrap((int(p) & int(q)) ^ (~int(p) | int(q)), 64) for p, q in zip(a, c)]
    for name, run in runs.items():
        np.testing.assert_array_equal(run["l"], np.array(want_l, np.int64), err_msg=name)
        np.testing.assert_array_equal(run["r"], np.array(want_r, np.int64), err_msg=name)
        np.testing.assert_array_equal(run["x"], np.array(want_x, np.int64), err_msg=name)


def test_unpacking_two_nibbles_per_byte_in_an_f32_statement():
    """The literals 4 and 15 are i32 in an f32 statement: a bitwise operation's literals take
    its type. Code 0..15 with a zero point of 8 and a scale per element."""
    n = 256
    packed = np.arange(n, dtype=np.uint8)
    scale = RNG.standard_normal(n).astype(np.float32)
    program = parse(
        f"param N = {n}\nin W: u8[N]\nin s: f32[N]\nout w: f32[N, 2]\n"
        "par N i {\n  w[i, 0] = f32((W[i] & 15) - 8) * s[i]\n  w[i, 1] = f32((W[i] >> 4) - 8) * s[i]\n}",
        name="nibbles",
    ).bind_defaults()
    runs, _ = run_everywhere(program, {"W": packed, "s": scale})
    low = np.array([(int(v) % 16) - 8 for v in packed], np.float32) * scale
    high = np.array([(int(v) // 16) - 8 for v in packed], np.float32) * scale
    for name, run in runs.items():
        np.testing.assert_array_equal(run["w"], np.stack([low, high], axis=1), err_msg=name)


def test_index_values_take_the_operations_type_not_the_statements():
    """``(z[i] + i) << 40`` with an i64 ``z`` is i64, and ``i`` in it too; ``i << 30`` alone
    is i32 and wraps, and so is ``i << 40`` under an i64 ``|``: each operation has its own
    type, from its own operands (a count of 40 is outside an i32's 0..31: 0)."""
    n = 8
    zero = np.zeros(n, np.int64)
    program = parse(
        f"param N = {n}\nin z: i64[N]\nout wide: i64[N]\nout narrow: i64[N]\nout inner: i64[N]\n"
        "par N i {\n  wide[i] = (z[i] + i) << 40\n  narrow[i] = z[i] | i << 30\n"
        "  inner[i] = z[i] | i << 40\n}",
        name="index_values",
    ).bind_defaults()
    runs, _ = run_everywhere(program, {"z": zero})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["wide"], [i * 2**40 for i in range(n)], err_msg=name)
        np.testing.assert_array_equal(run["narrow"], [_wrap(i << 30, 32) for i in range(n)], err_msg=name)
        np.testing.assert_array_equal(run["inner"], [0] * n, err_msg=name)


def test_a_bitwise_condition_on_data_predicates_the_statement():
    n = 100
    k = RNG.integers(-1000, 1000, n).astype(np.int32)
    program = parse(
        f"param N = {n}\nin k: i32[N]\ninout m: i32[N]\n"
        "par N i {\n  if k[i] & 3 == 1 {\n    m[i] = k[i] >> 2\n  }\n}",
        name="masked",
    ).bind_defaults()
    start = np.full(n, 77, np.int32)
    runs, kernel = run_everywhere(program, {"k": k, "m": start})
    want = np.array([int(v) >> 2 if int(v) & 3 == 1 else 77 for v in k], np.int32)
    for name, run in runs.items():
        np.testing.assert_array_equal(run["m"], want, err_msg=name)
    # C binds == tighter than &: the printed condition must keep the parentheses
    assert "& 3) == 1" in kernel.source


ERRORS = [
    ("y[i] = x[i] & 1", ProgramError, "'&' takes integers, and its operand 'x[i]' is f32", "7:15"),
    ("y[i] = f32(k[i] | 1.5)", ProgramError, "operand '1.5' is f32", "7:19"),
    ("m[i] = ~x[i]", ProgramError, "'~' takes integers", "7:10"),
    ("m[i] = k[i] << exp(x[i])", ProgramError, "operand 'exp(x[i])' is f32", "7:15"),
    (
        "m[i] = k[i] & 5000000000",
        RangeError,
        "does not fit in i32 (-2147483648..2147483647), the type its '&'",
        "7:17",
    ),
    ("y[i] = x[k[i] & 1]", NotAffineError, "'&' cannot appear in an index", "7:17"),
    ("y[i] = x[~i]", NotAffineError, "'~' cannot appear in an index", "7:12"),
    ("if i & 1 == 0 { m[i] = 1 }", NotAffineError, "i & 1 is i % 2", "7:8"),
    ("m[i] = k[i] && 1", ParseError, "'&&' is written 'and'", "7:15"),
    ("m[i] = k[i] || 1", ParseError, "'||' is written 'or'", "7:15"),
]


@pytest.mark.parametrize("body, error, message, where", ERRORS)
def test_misuse_is_a_located_error(body, error, message, where):
    text = (
        f"param N = 8\nin x: f32[N]\nin k: i32[N]\nout y: f32[N]\nout m: i32[N]\npar N i {{\n  {body}\n}}\n"
    )
    with pytest.raises(error) as caught:
        parse(text, source="bits.te")
    assert message in str(caught.value)
    assert f"bits.te:{where}" in str(caught.value)


def test_an_index_value_under_a_bitwise_operation_is_not_the_statements_float():
    """In an f32 statement ``i & 1`` is i32 (an IndexValue in the operation's type)."""
    program = parse(
        "param N = 6\nout y: f32[N]\npar N i { y[i] = f32(i & 1) * 0.5 }", name="p"
    ).bind_defaults()
    inner = _value(program).lhs.args[0]
    assert isinstance(inner.lhs, IndexValue)
    runs, _ = run_everywhere(program, {})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["y"], [0, 0.5, 0, 0.5, 0, 0.5], err_msg=name)


def test_below_a_conversion_or_in_a_comparison_literals_take_the_statements_type_again():
    """A review's finding: the bitwise type reached every literal below the operation, so
    ``i64(d[i] * 0.3) << 0`` multiplied an f64 by the f32 0.3 (1 where the cast alone gives
    0), ``(d[i] > 0.1) & 1`` compared with the f32 0.1, and ``(z[i] > 3000000000) & 1`` was
    a RangeError. A conversion's argument and a comparison are typed as anywhere else."""
    d = np.array([3.3333333333, 0.100000001, 0.1], np.float64)
    z = np.array([3000000001, 3000000000, -5], np.int64)
    program = parse(
        "param N = 3\nin d: f64[N]\nin z: i64[N]\nout a: i64[N]\nout b: i64[N]\nout c: i64[N]\n"
        "par N i {\n  a[i] = i64(d[i] * 0.3) << 0\n  b[i] = (d[i] > 0.1) & 1\n"
        "  c[i] = (z[i] > 3000000000) & 1 | i32(z[i] * 0.5 > 1.5) << 1\n}",
        name="nested",
    ).bind_defaults()
    runs, _ = run_everywhere(program, {"d": d, "z": z})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["a"], [int(x * 0.3) for x in d.tolist()], err_msg=name)
        np.testing.assert_array_equal(run["b"], [int(x > 0.1) for x in d.tolist()], err_msg=name)
        want_c = [int(v > 3000000000) | (int(v * 0.5 > 1.5) << 1) for v in z.tolist()]
        np.testing.assert_array_equal(run["c"], want_c, err_msg=name)


def test_the_smallest_integer_literal_is_printed_so_that_the_sum_after_it_wraps():
    """C reads -2147483648 as the negation of the long 2147483648: ``(k & -2147483648) - 1``
    was a 64-bit difference on the host (no wrap to 2147483647)."""
    k = np.array([-1, 5, -2147483648, 2147483647], np.int32)
    program = parse(
        "param N = 4\nin k: i32[N]\nout m: i32[N]\nout p: i32[N]\n"
        "par N i {\n  m[i] = (k[i] & -2147483648) - 1\n  p[i] = (k[i] & -2147483648) - 1 > 0\n}",
        name="minimum",
    ).bind_defaults()
    runs, kernel = run_everywhere(program, {"k": k})
    want = [_wrap((int(v) & -(2**31)) - 1, 32) for v in k]
    for name, run in runs.items():
        np.testing.assert_array_equal(run["m"], want, err_msg=name)
        np.testing.assert_array_equal(run["p"], [int(w > 0) for w in want], err_msg=name)
    assert "(-2147483647 - 1)" in kernel.source
    assert literal(-(2**63), DType.I64) == "(-9223372036854775807LL - 1)"


def test_bool_of_an_index_stands_as_an_if_condition_and_a_non_condition_under_not_is_named():
    program = parse("param N = 6\nout m: i32[N]\npar N i { if bool(i % 3) { m[i] = 1 } }", name="b")
    runs, _ = run_everywhere(program.bind_defaults(), {})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["m"], [0, 1, 1, 0, 1, 1], err_msg=name)
    with pytest.raises(ProgramError, match="and, or, not join conditions") as info:
        parse("param N = 6\nin k: i32[N]\nout m: i32[N]\npar N i { m[i] = not k[i] }", source="n.te")
    assert "n.te:4:22" in str(info.value)  # at k[i]
