"""Scatters (issue 13): ``O[I[i]] += x`` through atomic updates. Integer scatters give one
result in any order of the updates; float ones only with ``deterministic=False``. Each is
run by the reference, the oracle and the host emulation against NumPy written here
(``np.bincount``, ``np.add.at``), compiled by NVRTC; misuse is a located error; the proof
finds no race between atomics with one operator and finds the race with any other access."""

from __future__ import annotations

import numpy as np
import pytest
from everywhere import run_everywhere

import polymap
from polymap.cli import main
from polymap.errors import ArgumentError, BoundsError, ParseError, ProgramError, RaceError, VerificationError
from polymap.ir.atomics import atomic_updates
from polymap.ir.parse import load, parse
from polymap.reference import reference

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _program(body: str, out: str = "i32", x: str = "i32", n: int = 600, bins: int = 7):
    return parse(
        f"param N = {n}\nparam B = {bins}\nin I: i32[N]\nin x: {x}[N]\nout O: {out}[B]\npar N i {{ {body} }}",
        name="scatter",
    ).bind_defaults()


RNG = np.random.default_rng(7)
BINS = RNG.integers(0, 7, 600).astype(np.int32)


def test_the_histogram_model_counts_each_intensity_and_sums_a_channel_per_bin():
    program = load(ROOT / "models" / "histogram.te").bind(N=5000)
    p = RNG.integers(0, 256, 5000).astype(np.uint8)
    g = RNG.integers(-(2**31), 2**31 - 1, 5000).astype(np.int32)
    runs, _ = run_everywhere(program, {"P": p, "G": g})
    want_sum = np.zeros(256, np.int64)
    np.add.at(want_sum, p.astype(np.int64), g.astype(np.int64))
    for name, run in runs.items():
        np.testing.assert_array_equal(run["H"], np.bincount(p, minlength=256), err_msg=name)
        np.testing.assert_array_equal(run["Gsum"], want_sum, err_msg=name)


@pytest.mark.parametrize("dtype", ["i32", "i64"])
@pytest.mark.parametrize("op", ["+=", "-=", "max=", "min="])
def test_integer_scatters_are_exact_in_any_order(op, dtype):
    np_type = np.int32 if dtype == "i32" else np.int64
    x = RNG.integers(np.iinfo(np_type).min // 2, np.iinfo(np_type).max // 2, 600).astype(np_type)
    program = _program(f"O[I[i]] {op} x[i]", out=dtype, x=dtype)
    runs, _ = run_everywhere(program, {"I": BINS, "x": x})
    want = np.zeros(7, np_type)  # an out buffer starts at zeros
    ufunc = {"+=": np.add, "-=": np.subtract, "max=": np.maximum, "min=": np.minimum}[op]
    with np.errstate(over="ignore"):
        ufunc.at(want, BINS, x)  # wraps, as C's two's complement does
    for name, run in runs.items():
        np.testing.assert_array_equal(run["O"], want, err_msg=name)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("op", ["+=", "-=", "max=", "min="])
def test_float_scatters_run_with_deterministic_off_equal_to_numpy_within_rounding(op, dtype):
    np_type = np.float32 if dtype == "f32" else np.float64
    x = RNG.standard_normal(600).astype(np_type)
    x[5] = np.nan if op in ("max=", "min=") else x[5]  # max and min propagate NaN
    program = _program(f"O[I[i]] {op} x[i]", out=dtype, x=dtype)
    kernel = polymap.compile(program, deterministic=False)
    assert ".entry" in kernel.ptx()
    want = np.zeros(7, np.float64)
    ufunc = {"+=": np.add, "-=": np.subtract, "max=": np.maximum, "min=": np.minimum}[op]
    with np.errstate(invalid="ignore"):
        ufunc.at(want, BINS, x.astype(np.float64))
    for got in (reference(program, I=BINS, x=x)["O"], kernel.run_host(I=BINS, x=x)["O"]):
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "f32" else 1e-12)


def test_the_value_is_converted_to_the_targets_type_before_the_atomic_update():
    # 2.7 is added as 2 to an i32 bin (C's conversion toward zero), and 1.5 to an f32 bin
    # in f32: the update the GPU's atomicAdd makes
    program = _program("O[I[i]] += x[i] * 0.9", out="i32", x="f32", n=4, bins=2)
    x = np.array([3, 3, 1, 1], np.float32)
    i = np.array([0, 0, 1, 0], np.int32)
    runs, _ = run_everywhere(program, {"I": i, "x": x})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["O"], [2 + 2 + 0, 0], err_msg=name)


def test_a_float_scatter_is_refused_unless_deterministic_is_off_and_the_mapping_keeps_the_choice():
    program = _program("O[I[i]] += x[i]", out="f32", x="f32")
    with pytest.raises(
        ProgramError, match=r"S0 `O\[I\[i\]\] \+= x\[i\]` updates the float buffer 'O'.*deterministic=False"
    ) as info:
        polymap.optimize(program)
    assert info.value.loc is not None and info.value.loc.line == 6
    mapping = polymap.optimize(program, deterministic=False)
    assert not mapping.deterministic
    assert "its float result varies with their order from run to run" in str(mapping)
    data = mapping.to_json()
    assert data["deterministic"] is False
    assert data["atomic_updates"] == [{"statement": "S0", "buffer": "O", "operator": "+="}]
    kernel = polymap.compile(program, mapping)  # a given mapping carries the permission
    np.testing.assert_allclose(
        kernel.run_host(I=BINS, x=np.ones(600, np.float32))["O"], np.bincount(BINS, minlength=7)
    )
    with pytest.raises(ArgumentError, match="deterministic belong to optimize"):
        polymap.compile(program, mapping, deterministic=False)
    # integer scatters need no permission
    assert polymap.optimize(_program("O[I[i]] += 1")).deterministic


@pytest.mark.parametrize(
    ("body", "out", "words"),
    [
        ("O[I[i]] = x[i]", "i32", "must be an update that runs as an atomic: +=, -=, max= or min=, not ="),
        ("O[I[i]] *= x[i]", "i32", "not *="),
        ("O[I[i]] += x[i]", "f16", "needs a type the GPU updates atomically: i32, i64, f32, f64"),
        ("O[I[i]] += O[0]", "i32", "reads 'O' only through its own update (it reads O[0] too"),
    ],
)
def test_misused_scatters_are_located_errors(body, out, words):
    with pytest.raises(ProgramError) as info:
        _program(body, out=out)
    assert words in str(info.value)
    assert info.value.loc is not None and info.value.loc.line == 6


def test_a_scatter_into_a_block_local_buffer_is_refused():
    text = "param N = 8\nin I: i32[N]\nout y: i32[N]\npar N i {\n  new t: i32[4]\n  t[I[i]] += 1\n  y[i] = t[0]\n}"
    with pytest.raises(ProgramError, match="must be declared at the top of the program") as info:
        parse(text)
    assert info.value.loc.line == 6


def test_atomics_with_one_operator_commute_and_any_other_access_races():
    ok = parse(
        "param N = 64\nin I: i32[N]\nin J: i32[N]\nout O: i32[8]\npar N i { O[I[i]] += 1; O[J[i]] += 2 }"
    )
    mapping = polymap.optimize(ok)
    assert any("atomic updates that commute (one operator, or += and -=)" in line for line in mapping.proofs)
    mixed = parse("param N = 64\nin I: i32[N]\nout O: i32[8]\npar N i { O[I[i]] += 1; O[I[i]] max= 2 }")
    with pytest.raises((RaceError, VerificationError), match="O"):
        polymap.optimize(mixed)
    read = parse(
        "param N = 64\nin I: i32[N]\nout O: i32[N]\nout y: i32[N]\npar N i { O[I[i]] += 1; y[i] = O[i] }"
    )
    with pytest.raises((RaceError, VerificationError), match="O"):
        polymap.optimize(read)


def test_an_atomic_add_and_an_atomic_subtract_commute():
    """Both add (``-=`` the negation): no race between them, no dependence to keep, and the
    host's result is NumPy's, whatever order the threads take."""
    n = 200
    rng = np.random.default_rng(4)
    idx, x = rng.integers(0, 8, n).astype(np.int32), rng.integers(-50, 50, n).astype(np.int32)
    program = parse(
        f"param N = {n}\nin I: i32[N]\nin x: i32[N]\nout O: i32[8]\nout s: i32[1]\n"
        "par N i {\n  O[I[i]] += x[i]\n  O[I[(i + 1) % 200]] -= 3\n  atomic s[0] += x[i]\n  atomic s[0] -= 1\n}"
    ).bind_defaults()
    kernel = polymap.compile(program)
    assert any("atomic updates that commute" in line for line in kernel.mapping.proofs)
    want = np.zeros(8, np.int64)
    np.add.at(want, idx, x)
    np.add.at(want, np.roll(idx, -1), -3)
    got = kernel.run_host(I=idx, x=x)
    np.testing.assert_array_equal(got["O"], want)
    np.testing.assert_array_equal(got["s"], [int(x.sum()) - n])
    np.testing.assert_array_equal(reference(program, I=idx, x=x)["O"], want)


def test_a_scatter_in_a_thread_loop_and_a_later_kernel_that_reads_the_result():
    text = """param N = 48
param K = 5
in I: i32[N, K]
in x: i32[N, K]
out O: i32[16]
out y: i32[16]
par N i { seq K k { O[I[i, k]] += x[i, k] } }
par 16 b { y[b] = O[b] * 2 }
"""
    program = parse(text, name="twice").bind_defaults()
    i = RNG.integers(0, 16, (48, 5)).astype(np.int32)
    x = RNG.integers(-100, 100, (48, 5)).astype(np.int32)
    runs, _ = run_everywhere(program, {"I": i, "x": x})
    want = np.zeros(16, np.int64)
    np.add.at(want, i.ravel(), x.ravel())
    for name, run in runs.items():
        np.testing.assert_array_equal(run["O"], want, err_msg=name)
        np.testing.assert_array_equal(run["y"], 2 * want, err_msg=name)


def test_an_index_outside_the_bins_is_a_bounds_error_in_the_reference_and_on_the_host():
    program = _program("O[I[i]] += 1")
    bad = BINS.copy()
    bad[100] = 7
    with pytest.raises(BoundsError, match=r"I\[100\] = 7.*outside \[0, 7\)"):
        reference(program, I=bad, x=np.zeros(600, np.int32))
    kernel = polymap.compile(program)
    with pytest.raises(BoundsError, match=r"O\[I\[i\]\]"):
        kernel.run_host(I=bad, x=np.zeros(600, np.int32))


@pytest.mark.parametrize(
    "text",
    [
        "param M = 64\nparam K = 50\nin I: i32[M]\nin X: i32[M, K]\nout O: i32[M, 8]\n"
        "par M r { seq K k { O[r, I[r]] += X[r, k] } }",
        "param N = 30\nin I: i32[4]\nin X: i32[N]\nout O: i32[8]\nseq 4 t { seq N i { O[I[t]] += X[i] } }",
        "param N = 30\nin I: i32[4]\nin X: i32[N]\nout O: i32[8]\npar 1 t { seq N i { O[I[t]] += X[i] } }",
    ],
)
def test_a_scatter_in_a_loop_that_keeps_its_element_stays_an_atomic_update(text):
    # register promotion took O[r, I[r]] for an accumulator and stored it with a plain `=`
    # after the loop (a review found it: the report called the store atomic, codegen failed)
    program = parse(text).bind_defaults()
    inputs = {"I": RNG.integers(0, 8, program.buffer("I").shape[0].value).astype(np.int32)}
    inputs["X"] = RNG.integers(-50, 50, tuple(e.value for e in program.buffer("X").shape)).astype(np.int32)
    runs, kernel = run_everywhere(program, inputs)
    for name, run in runs.items():
        np.testing.assert_array_equal(run["O"], runs["reference"]["O"], err_msg=name)
    assert all(s.op.value == "+=" for s in atomic_updates(kernel.mapping.program))


def test_the_command_line_maps_a_float_scatter_only_when_asked(tmp_path, capsys):
    path = tmp_path / "sums.te"
    path.write_text(
        "param N = 1000\nin I: i32[N]\nin x: f32[N]\nout O: f32[10]\npar N i { O[I[i] % 10] += x[i] }\n"
    )
    # an index read from a buffer stands whole: I[i] % 10 is refused; the bins come as data
    assert main(["map", str(path)]) != 0
    path.write_text(
        "param N = 1000\nin I: i32[N]\nin x: f32[N]\nout O: f32[10]\npar N i { O[I[i]] += x[i] }\n"
    )
    assert main(["map", str(path)]) != 0
    assert "--nondeterministic" in capsys.readouterr().err
    assert main(["map", str(path), "--nondeterministic"]) == 0
    assert "each instance updates 'O' atomically" in capsys.readouterr().out


def test_the_machine_code_of_the_histogram_makes_its_updates_with_atomics():
    pytest.importorskip("cuda.bindings")
    report = polymap.compile(load(ROOT / "models" / "histogram.te")).machine_code()
    (kernel,) = report.kernels
    # one REDG (a reduction without a result) per scatter, no plain store of H or Gsum
    assert kernel.whole.atomics == 2 and kernel.whole.global_stores == 0
    assert "2 atomics" in str(report)


def test_an_update_written_atomic_sums_across_threads_and_is_refused_where_it_is_no_update():
    program = parse(
        "param N = 5000\nin x: i32[N]\nout s: i32[1]\npar N i { atomic s[0] += x[i] }", name="full"
    )
    program = program.bind_defaults()
    assert "atomic s[0] += x[i]" in str(program)  # printed as written, and parsed back the same
    assert parse(str(program), name="full").body == program.body
    x = RNG.integers(-1000, 1000, 5000).astype(np.int32)
    runs, kernel = run_everywhere(program, {"x": x})
    for name, run in runs.items():
        np.testing.assert_array_equal(run["s"], [x.sum()], err_msg=name)
    assert "pm_atomic_add(&s[0]" in kernel.source
    # without `atomic` the same nest is a race; a float target needs deterministic=False
    with pytest.raises(RaceError, match="writes s\\[0\\] in two different iterations"):
        polymap.optimize(parse("param N = 64\nin x: i32[N]\nout s: i32[1]\npar N i { s[0] += x[i] }"))
    floats = parse("param N = 64\nin x: f32[N]\nout s: f32[1]\npar N i { atomic s[0] += x[i] }")
    with pytest.raises(ProgramError, match="updates the float buffer 's' atomically"):
        polymap.optimize(floats)
    assert polymap.optimize(floats, deterministic=False).proved
    with pytest.raises(ProgramError, match="an atomic write must be an update") as info:
        parse("param N = 64\nin x: i32[N]\nout s: i32[1]\npar N i { atomic s[0] = x[i] }")
    assert info.value.loc.line == 4 and info.value.loc.col == 11


def test_an_atomic_update_inside_a_thread_loop_stays_atomic():
    # its element is other threads' too: register promotion, lanes and splits leave it alone
    text = "param M = 64\nparam K = 300\nin X: i32[M, K]\nout s: i32[4]\npar M i { seq K k { atomic s[i % 4] += X[i, k] } }"
    program = parse(text).bind_defaults()
    x = RNG.integers(-9, 9, (64, 300)).astype(np.int32)
    runs, kernel = run_everywhere(program, {"X": x})
    want = np.array([x[r::4].sum() for r in range(4)])
    for name, run in runs.items():
        np.testing.assert_array_equal(run["s"], want, err_msg=name)
    assert kernel.mapping.program == program


def test_the_updates_of_one_element_are_the_atomics_roof():
    # 2^24 atomic additions to s[0] run one after another where s[0] lives: the roof the
    # report names, in SCIP's objective as printed; a scatter's elements are not counted
    program = parse("param N = 16777216\nin x: i32[N]\nout s: i32[2]\npar N i { atomic s[i % 2] += x[i] }")
    mapping = polymap.optimize(program)
    (cost,) = mapping.costs
    assert cost.atomic_s == pytest.approx(2**23 / mapping.target.clock_hz)
    assert cost.bound_by == "atomics" and "(atomics bound)" in str(mapping)
    assert mapping.solver[0].objective == pytest.approx(cost.objective_s * 1e6)
    histogram = polymap.optimize(load(ROOT / "models" / "histogram.te"))
    assert histogram.costs[0].atomic_s == 0.0


def test_the_atomics_roof_counts_the_updates_that_run_of_each_element_all_statements_together():
    # (a review found the roof counting instances outside an if, and taking the most
    # updated statement instead of the most updated element)
    def updates(text: str) -> int:
        mapping = polymap.optimize(parse(text))
        return round(mapping.costs[0].atomic_s * mapping.target.clock_hz)

    guarded = (
        "param N = 10000000\nin x: i32[N]\ninout s: i32[2]\npar N i { if i < 10 { atomic s[0] += x[i] } }"
    )
    assert updates(guarded) == 10
    both = (
        "param N = 10000000\nin x: i32[N]\nout s: i32[2]\npar N i { atomic s[0] += x[i]\n atomic s[0] += 1 }"
    )
    assert updates(both) == 2 * 10**7
    blocks = "param N = 1000\nout s: i32[16]\npar 1000 i { atomic s[i // 64] += 1 }"
    assert updates(blocks) == 64  # 15 elements of 64 and one of 40: the most, not the mean


def test_an_atomic_update_of_a_0d_buffer_and_an_atomic_before_no_update():
    program = parse("param N = 1000\nin x: i32[N]\nout s: i32\npar N i { atomic s += x[i] }").bind_defaults()
    runs, _ = run_everywhere(program, {"x": np.arange(1000, dtype=np.int32)})
    for name, run in runs.items():
        assert int(run["s"]) == 499500, name
    with pytest.raises(ParseError, match="expected an update after .atomic."):
        parse("param N = 4\nin x: i32[N]\nout s: i32[1]\natomic par N i { s[0] += x[i] }")
