"""The value functions of issue 13: ``sin cos erf rsqrt sigmoid floor ceil pow``, ``%`` on
values (floored, as NumPy's mod) and the conversions ``f32(x) f64(x) i32(x)``: the
reference against NumPy written independently here, against the scalar oracle, and the
emitted code on the host (NVRTC compiles it too)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from oracle import run_oracle

import polymap
from polymap.codegen.cexpr import records_faults
from polymap.errors import ArgumentError, ArityError, UndeclaredError
from polymap.ir.parse import parse
from polymap.reference import reference

X = np.array([-7.25, -2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 2.75, 6.5, 12.0], np.float32)


def _program(body: str, out: str = "f32"):
    return parse(f"param N = 10\nin x: f32[N]\nout y: {out}[N]\npar N i {{ y[i] = {body} }}", name="fn")


def _check(body: str, want: np.ndarray, *, out: str = "f32", rtol: float = 0.0) -> None:
    """The reference equals ``want`` (within ``rtol``), the oracle equals the reference, and
    the host run equals it within one float32 rounding of a libm function (``rtol`` or 2 ulp)."""
    program = _program(body, out).bind_defaults()
    got = reference(program, x=X)["y"]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)
    oracle, _ = run_oracle(program, {"x": X})
    np.testing.assert_array_equal(oracle["y"], got)
    kernel = polymap.compile(program)
    np.testing.assert_allclose(kernel.run_host(x=X)["y"], got, rtol=max(rtol, 2.5e-7), atol=1e-30)
    kernel.ptx()


x64 = X.astype(np.float64)


@pytest.mark.parametrize(
    "body, want, rtol",
    [
        ("sin(x[i])", np.sin(x64), 1e-7),
        ("cos(x[i])", np.cos(x64), 1e-7),
        ("erf(x[i])", np.array([math.erf(v) for v in x64]), 1e-7),
        ("rsqrt(abs(x[i]) + 1)", 1 / np.sqrt(np.abs(x64) + 1), 2e-7),
        ("sigmoid(x[i])", 1 / (1 + np.exp(-x64)), 2e-7),
        ("pow(abs(x[i]), 1.5)", np.abs(x64) ** 1.5, 2e-7),
        ("floor(x[i]) + ceil(x[i])", np.floor(x64) + np.ceil(x64), 0),
        ("x[i] % 2.5", x64 - np.floor(x64 / 2.5) * 2.5, 1e-6),
        ("x[i] % -2.5", x64 - np.floor(x64 / -2.5) * -2.5, 1e-6),
    ],
)
def test_a_function_computes_its_mathematical_value(body, want, rtol):
    _check(body, want, rtol=rtol)


def test_the_conversions_truncate_saturate_and_widen_as_a_store_does():
    # i32 of a float truncates toward zero; 3e9 saturates; f64 keeps the f32 value exactly
    _check("i32(x[i] * 10) + i32(2.9)", np.trunc(x64 * 10) + 2, out="i32")
    in_f32 = (X * np.float32(1e9)).astype(np.float64)  # the product is an f32 one
    _check("i32(x[i] * 1e9)", np.clip(np.trunc(in_f32), -(2**31), 2**31 - 1), out="i32")
    program = parse("param N = 2\nin x: f32[N]\nout y: f64[N]\npar N i { y[i] = f64(x[i]) * f64(x[i]) }")
    x = np.array([16777217 / 3, 0.1], np.float32)
    got = polymap.compile(program.bind_defaults()).run_host(x=x)["y"]
    np.testing.assert_array_equal(got, x.astype(np.float64) ** 2)  # computed in f64, not rounded to f32


def test_i32_modulo_is_floored_and_a_modulo_by_zero_is_the_datas_error_on_the_host_too():
    text = "param N = 6\nin a: i32[N]\nin b: i32[N]\nout r: i32[N]\npar N i { r[i] = a[i] % b[i] }"
    program = parse(text, name="mod").bind_defaults()
    a = np.array([7, -7, 7, -7, -2147483648, 5], np.int32)
    b = np.array([3, 3, -3, -3, -1, 5], np.int32)
    kernel = polymap.compile(program)
    np.testing.assert_array_equal(kernel.run_host(a=a, b=b)["r"], [1, 2, -2, -1, 0, 0])
    np.testing.assert_array_equal(reference(program, a=a, b=b)["r"], np.mod(a, b))
    assert records_faults(kernel.source)
    b[2] = 0
    with pytest.raises(ArgumentError) as want:
        reference(program, a=a, b=b)
    with pytest.raises(ArgumentError) as got:
        kernel.run_host(a=a, b=b)
    assert str(got.value) == str(want.value)
    assert re.search(r"statement S0 \(r\[i\] = a\[i\] % b\[i\]\): i32 division by zero", str(got.value))


def test_function_errors_name_the_function_and_its_position():
    with pytest.raises(ArityError, match=r"t.te:4:18: pow\(\) takes 2 argument"):
        parse("param N = 4\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = pow(x[i]) }", source="t.te")
    with pytest.raises(
        UndeclaredError, match=r"unknown function 'sinh' \(known: .*erf.*sigmoid.*i32.*bool, select\)"
    ):
        parse("param N = 4\nin x: f32[N]\nout y: f32[N]\npar N i { y[i] = sinh(x[i]) }")


def test_ieee_special_values_come_out_alike_signed_zeros_included():
    # a floored % gives its zero the divisor's sign (C's fmod the dividend's); pow follows
    # C99 where NumPy differs (pow(-inf, 0.5) = +inf, pow(-0, 0.5) = +0); and the host
    # compiler must not fold 0 - x into -x (x = 0 gives +0, whose reciprocal is +inf)
    text = (
        "param N = 12\nin x: f32[N]\nin e: f32[N]\nin k: i32[N]\nin z: f32[N]\n"
        "out p: f32[N]\nout m: f32[N]\nout r: f32[N]\n"
        "par N i {\n  p[i] = pow(x[i], e[i])\n  m[i] = x[i] % e[i]\n  r[i] = 1 / (-3 * (0 - k[i])) + z[i]\n}"
    )
    program = parse(text).bind_defaults()
    x = np.array([-np.inf, -0.0, 0.0, -5, 5, -2.5, 3, np.inf, -1, 2, np.nan, -np.inf], np.float32)
    e = np.array([0.5, 0.5, 0.5, 2.5, -2.5, 2.5, 0, 2, np.inf, -1, 0, 3], np.float32)
    k = np.zeros(12, np.int32)
    inputs = {"x": x, "e": e, "k": k, "z": np.zeros(12, np.float32)}
    want = reference(program, **inputs)
    assert want["p"][0] == np.inf and want["p"][1] == 0 and not np.signbit(want["p"][1])
    assert not np.signbit(want["m"][3]) and np.signbit(want["m"][4])  # -5 % 2.5, 5 % -2.5
    assert np.all(want["r"] == -np.inf)  # -3 * (0 - 0) is -0
    oracle, _ = run_oracle(program, inputs)
    host = polymap.compile(program).run_host(**inputs)
    for name, value in want.items():
        for other in (oracle[name], host[name]):
            np.testing.assert_array_equal(other, value)
            np.testing.assert_array_equal(np.signbit(other), np.signbit(value))


def test_run_compares_infinities_and_nans_exactly_and_scales_its_tolerance_by_finite_values():
    from polymap.compare import compare_output as _compare
    from polymap.ir.nodes import DType

    inf = np.inf
    assert _compare("y", DType.F32, [5, -3, inf, np.nan], [5, -3, inf, np.nan])["ok"]
    # an infinite reference value must not widen the tolerance of the others
    assert not _compare("y", DType.F32, [0, 1e6, inf], [5, -3, inf])["ok"]
    assert not _compare("y", DType.F32, [5, -3, -inf], [5, -3, inf])["ok"]
    assert not _compare("y", DType.F32, [5, -3, 1e30], [5, -3, inf])["ok"]


def test_divide_update_divides_as_slash_floats_truly_i32_toward_zero_and_faults_on_zero():
    text = (
        "param N = 6\nin a: i32[N]\nin b: i32[N]\nin x: f32[N]\nout q: i32[N]\nout y: f32[N]\n"
        "par N i {\n  q[i] = a[i]\n  q[i] /= b[i]\n  y[i] = x[i]\n  seq 3 k { y[i] /= 2 }\n}"
    )
    program = parse(text, name="div").bind_defaults()
    a = np.array([7, -7, 7, -7, -2147483648, 9], np.int32)
    b = np.array([2, 2, -2, -2, -1, 3], np.int32)
    x = np.array([1, -3, 8, 0.5, -0.0, 6], np.float32)
    inputs = {"a": a, "b": b, "x": x}
    want = reference(program, **inputs)
    np.testing.assert_array_equal(want["q"], [3, -3, -3, 3, -2147483648, 3])
    np.testing.assert_array_equal(want["y"], x / 8)
    oracle, _ = run_oracle(program, inputs)
    kernel = polymap.compile(program)
    host = kernel.run_host(**inputs)
    for name in want:
        np.testing.assert_array_equal(oracle[name], want[name])
        np.testing.assert_array_equal(host[name], want[name])
    b[3] = 0
    with pytest.raises(ArgumentError) as expected:
        reference(program, **inputs)
    with pytest.raises(ArgumentError) as got:
        kernel.run_host(**inputs)
    assert str(got.value) == str(expected.value) and "S1 (q[i] /= b[i]): i32 division by zero" in str(
        got.value
    )


def test_nextafter_steps_to_the_next_float_alike_everywhere():
    # exact in every implementation: the reference (NumPy), the oracle (bit steps of its
    # own), the host's C library, NVRTC's; signed zeros, infinities, NaN and the subnormals
    from everywhere import run_everywhere

    text = (
        "param N = 12\nin x: f32[N]\nin y: f32[N]\nin d: f64[N]\nout a: f32[N]\nout b: f64[N]\n"
        "par N i { a[i] = nextafter(x[i], y[i]); b[i] = nextafter(d[i], y[i]) }"
    )
    program = parse(text).bind_defaults()
    x = np.array([0, -0.0, 1, -1, np.inf, -np.inf, np.nan, 3.4028235e38, 1e-45, -1e-45, 2, 5], np.float32)
    y = np.array([1, -1, 2, -2, 0, 0, 1, np.inf, 0, 0, 2, np.nan], np.float32)
    runs, _ = run_everywhere(program, {"x": x, "y": y, "d": x.astype(np.float64)})
    with np.errstate(over="ignore"):
        want_a, want_b = np.nextafter(x, y), np.nextafter(x.astype(np.float64), y.astype(np.float64))
    assert want_a[0] > 0 and want_a[1] < 0 and want_a[8] == 0  # the smallest subnormal steps to 0
    for name, run in runs.items():
        np.testing.assert_array_equal(run["a"], want_a, err_msg=name)
        np.testing.assert_array_equal(run["b"], want_b, err_msg=name)
        np.testing.assert_array_equal(np.signbit(run["a"]), np.signbit(want_a), err_msg=name)
