"""Select scans (an argmax's position moved by a select beside its running maximum)
rewritten as exact min=/max= passes (``transform.scans``, ``scan_choice.choose_scans``):
which loops qualify, the rewrite against the program as written in the reference executor
on rows of ties, infinities, NaN and signed zeros, SCIP's choice, pins, replay, the report,
and host runs."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polymap
from polymap.errors import ArgumentError
from polymap.reference import reference
from polymap.transform.scans import candidates, rewrite_scan, select_scans

ROOT = Path(__file__).resolve().parents[1]

# P = select(cond, j, P) beside M op= E, with M's start and P's start given per row; M an
# out buffer (seen by the caller: its update stays as a pass), or a block-local one
SCAN = """
param M = 6
param N = 7
in  X: {xtype}[M, N]
in  start: {xtype}[M]
out best: i32[M]
{declared}
par M i {{
  {local}
  {m} = start[i]
  best[i] = 3
  seq N j {{
    best[i] = select({cond}, j, best[i])
    {m} {op} X[i, j]
  }}
}}
"""

VARIANTS = {
    # name: (cond, op): the first of equal values (strict) or the last
    "argmax first": ("X[i, j] > {m}", "max="),
    "argmax first, mirrored": ("{m} < X[i, j]", "max="),
    "argmax last": ("X[i, j] >= {m}", "max="),
    "argmin first": ("X[i, j] < {m}", "min="),
    "argmin last": ("{m} >= X[i, j]", "min="),
}


@functools.cache
def _program(variant: str, local: bool, xtype: str = "f32") -> polymap.Program:
    cond, op = VARIANTS[variant]
    m = "mx" if local else "ext[i]"
    text = SCAN.format(
        xtype=xtype,
        declared="" if local else f"out ext: {xtype}[M]",
        local=f"new mx: {xtype}" if local else "",
        m=m,
        cond=cond.format(m=m),
        op=op,
    )
    return polymap.parse(text, name="scan")


@functools.cache
def _rewritten(variant: str, local: bool, xtype: str = "f32") -> polymap.Program:
    program = _program(variant, local, xtype)
    (scan,) = select_scans(program, polymap.analyze(program))
    return rewrite_scan(program, scan)


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, -1.0]
rows = st.lists(st.sampled_from(SPECIALS), min_size=6 * 7, max_size=6 * 7)
starts = st.lists(st.sampled_from([-np.inf, np.nan, 0.0, 1.0]), min_size=6, max_size=6)


@settings(max_examples=60, deadline=None)
@given(values=rows, start=starts, variant=st.sampled_from(sorted(VARIANTS)), local=st.booleans())
def test_the_passes_give_the_scans_result_for_every_input(values, start, variant, local):
    """The rewrite's position (and, where the caller sees it, its running extreme) equals
    the program's as written, for rows drawn from ties, infinities, NaN and signed zeros,
    with every start of the extreme (NaN included)."""
    x = np.array(values, np.float32).reshape(6, 7)
    s = np.array(start, np.float32)
    expected = reference(_program(variant, local), X=x, start=s)
    got = reference(_rewritten(variant, local), X=x, start=s)
    np.testing.assert_array_equal(got["best"], expected["best"])
    if not local:
        np.testing.assert_array_equal(got["ext"], expected["ext"])


def test_the_first_of_equal_maxima_is_numpys_argmax_and_the_last_is_its_mirror():
    """An oracle outside polymap: np.argmax (the first of equal values) for ``>``, and the
    last of equal values for ``>=``, on rows without NaN whose start is -inf."""
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, size=(6, 7)).astype(np.float32)
    s = np.full(6, -np.inf, np.float32)
    first = reference(_rewritten("argmax first", True), X=x, start=s)["best"]
    np.testing.assert_array_equal(first, np.argmax(x, axis=1))
    last = reference(_rewritten("argmax last", True), X=x, start=s)["best"]
    np.testing.assert_array_equal(last, 6 - np.argmax(x[:, ::-1], axis=1))


def test_an_integer_scan_needs_no_nan_pass_and_gives_the_same_position():
    program, rewritten = _program("argmax first", True, "i32"), _rewritten("argmax first", True, "i32")
    assert "nan_at" not in str(rewritten) and str(rewritten).count("seq N j") == 2
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 4, size=(6, 7)).astype(np.int32)
    s = rng.integers(-4, 4, size=6).astype(np.int32)
    np.testing.assert_array_equal(
        reference(rewritten, X=x, start=s)["best"], reference(program, X=x, start=s)["best"]
    )


def test_a_local_extreme_read_nowhere_else_loses_its_pass_and_a_seen_one_keeps_it():
    assert str(_rewritten("argmax first", True)).count("seq N j") == 3
    kept = str(_rewritten("argmax first", False))
    assert kept.count("seq N j") == 4 and "ext[i] max= X[i, j]" in kept


NOT_SCANS = {
    # a negated comparison is another function under NaN: select(E <= M, P, j) takes j at a NaN
    "select(X[i, j] <= mx, best[i], j)": "does not choose between 'j' and its own element",
    # the comparison against a value other than the one M takes the max of
    "select(X[i, j] + 1 > mx, j, best[i])": "condition is not",
    # max= with a < comparison: that is no argmax
    "select(X[i, j] < mx, j, best[i])": "condition is not",
    # the compared value reads the position
    "select(X[i, j] + best[i] > mx, j, best[i])": "condition is not",
}


@pytest.mark.parametrize("select", sorted(NOT_SCANS))
def test_a_loop_that_is_no_select_scan_says_why(select):
    text = f"""
param M = 4
param N = 5
in  X: f32[M, N]
out best: i32[M]
par M i {{
  new mx: f32
  mx = -inf
  best[i] = 0
  seq N j {{
    best[i] = {select}
    mx max= X[i, j]
  }}
}}
"""
    program = polymap.parse(text, name="not_a_scan")
    found = list(candidates(program, polymap.analyze(program)))
    assert len(found) == 1 and isinstance(found[0], tuple), found
    assert NOT_SCANS[select] in found[0][1]


def test_a_running_extreme_stored_narrower_than_the_value_is_no_scan():
    """An f16 maximum rounds what it keeps: the comparison with the next value sees the
    rounded one, so the position is no function of the values alone."""
    text = SCAN.format(xtype="f32", declared="", local="new mx: f16", m="mx", cond="X[i, j] > mx", op="max=")
    program = polymap.parse(text, name="narrow")
    ((_, why),) = candidates(program, polymap.analyze(program))
    assert "does not compute in the type of 'mx' (f16)" in why


def test_a_scan_whose_iterations_meet_through_a_third_buffer_is_left_alone():
    """A prefix-sum-like buffer written by the scan's other statement: not two statements."""
    text = """
param M = 4
param N = 5
in  X: f32[M, N]
out best: i32[M]
out run: f32[M, N]
par M i {
  new mx: f32
  mx = -inf
  best[i] = 0
  seq N j {
    best[i] = select(X[i, j] > mx, j, best[i])
    mx max= X[i, j]
    run[i, j] = mx
  }
}
"""
    program = polymap.parse(text, name="three")
    ((_, why),) = candidates(program, polymap.analyze(program))
    assert "exactly two assignments" in why


def test_argmax_rows_is_mapped_as_passes_on_the_lanes_and_runs_equal_to_the_reference():
    """models/argmax_rows.te: one thread per row as written (1.5% of an H100 at 4096 rows);
    SCIP's objective takes the passes, which spread over the lanes of a block per row."""
    mapping = polymap.optimize(polymap.load(ROOT / "models/argmax_rows.te"))
    (choice,) = mapping.scans
    written, passes = (objective for _, objective, _ in choice.options)
    assert choice.rewritten and passes < written / 10, choice.describe()
    assert mapping.kernels[0].lanes > 1 and mapping.costs[0].fill > 0.9
    assert "as exact min=/max= passes" in mapping.report()
    # the statements by text and place: their names are the rewritten program's in the tables
    assert (
        choice.statement
        == "`best[i] = select(X[i, j] > mx, j, best[i])` at 29:5 with `mx max= X[i, j]` at 30:5"
    )
    assert mapping.to_json()["scans"][0]["passes"] is True
    # at small sizes, on the host: the mapping replayed by compile, equal to the reference
    program = polymap.load(ROOT / "models/argmax_rows.te").bind(M=16, N=45)
    small = polymap.optimize(program)
    kernel = polymap.compile(program, small)
    x = np.random.default_rng(4).integers(-3, 4, size=(16, 45)).astype(np.float32)
    x[2, 9], x[5] = np.nan, -np.inf
    np.testing.assert_array_equal(kernel.run_host(X=x)["best"], reference(program, X=x)["best"])
    assert "select scan 'j' as exact min=/max= passes" in kernel.source


def test_a_short_scan_stays_as_written():
    """2^20 rows of 8: a thread per row fills the GPU, and three passes read each row three
    times (SCIP's objective: 11.4 us as written, 53 us as passes)."""
    mapping = polymap.optimize(polymap.load(ROOT / "models/argmax_rows.te").bind(M=1 << 20, N=8))
    (choice,) = mapping.scans
    assert not choice.rewritten, choice.describe()
    assert "as written" in choice.describe()


def test_a_passes_pin_decides_and_a_pin_on_a_loop_that_is_no_scan_says_why():
    program = polymap.load(ROOT / "models/argmax_rows.te")
    kept = polymap.optimize(program, pins={"j": {"passes": False}})
    assert not kept.scans[0].rewritten and kept.scans[0].pinned
    assert kept.kernels[0].lanes == 1
    with pytest.raises(ArgumentError, match="is no select scan: loop 'j' does not hold exactly two"):
        polymap.optimize(polymap.load(ROOT / "models/gemv.te"), pins={"j": {"passes": True}})
    with pytest.raises(ArgumentError, match="names no seq loop"):
        polymap.optimize(program, pins={"q": {"passes": True}})
    with pytest.raises(ArgumentError, match="passes must be true or false"):
        polymap.optimize(program, pins={"j": {"passes": "maybe"}})
    with pytest.raises(ArgumentError, match="names the scan's loop alone"):
        polymap.optimize(program, pins={"kernel0.j": {"passes": True}})


def test_the_cli_pins_the_passes_and_prints_the_choice(capsys):
    from polymap.cli import main

    assert main(["map", str(ROOT / "models/argmax_rows.te"), "--pin", "j.passes=no", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scans"][0]["passes"] is False and data["scans"][0]["pinned"] is True


def test_a_value_the_comparison_and_the_update_compute_in_different_types_is_no_scan():
    """``X[i, j] * 0.1`` with an f32 X: the update computes it in f32 (0.1 an f32 literal),
    the comparison with an f64 maximum in f64. The loop as written compares f64 values with
    rounded f32 ones (X all 7.0: the position moves every step, to 63); passes computing E in
    one type would stop at 0. Found by an adversarial review."""
    text = """
param M = 4
param N = 64
in  X: f32[M, N]
out best: i32[M]
par M i {
  new mx: f64
  mx = -inf
  best[i] = 0
  seq N j {
    best[i] = select(X[i, j] * 0.1 > mx, j, best[i])
    mx max= X[i, j] * 0.1
  }
}
"""
    program = polymap.parse(text, name="mixed")
    ((_, why),) = candidates(program, polymap.analyze(program))
    assert "does not compute in the type of 'mx'" in why
    x = np.full((4, 64), 7.0, np.float32)
    assert list(reference(program, X=x)["best"]) == [63] * 4  # the loop as written, kept
    mapping = polymap.optimize(program)
    assert not mapping.scans
    np.testing.assert_array_equal(polymap.compile(program, mapping).run_host(X=x)["best"], [63] * 4)


SEEN_LATER = {
    # a program-wide maximum that the scan itself reads again in the next step of t
    "next step": """
param T = 3
param M = 4
param N = 5
in  X: f32[T, M, N]
out best: i32[M]
new mx: f32[M]
par M i0 { mx[i0] = -inf }
par M i1 { best[i1] = 0 }
seq T t {
  par M i {
    seq N j {
      best[i] = select(X[t, i, j] > mx[i], j, best[i])
      mx[i] max= X[t, i, j]
    }
  }
}
""",
    # a block-local maximum read afterwards only as a scattered index of a target
    "scatter index": """
param M = 4
param N = 5
in  X: f32[M, N]
in  K: i32[M, N]
out best: i32[M]
out res: i32[M, 8]
par M i {
  new mx: i32
  mx = 0
  best[i] = 0
  seq N j {
    best[i] = select(K[i, j] > mx, j, best[i])
    mx max= K[i, j]
  }
  res[i, mx] max= 1
}
""",
}


@pytest.mark.parametrize("case", sorted(SEEN_LATER))
def test_a_maximum_seen_after_the_scan_keeps_its_pass(case):
    """The running maximum's pass stays wherever its value after the loop may be seen; both
    cases were dropped before (an adversarial review), and the rewrite then differed."""
    program = polymap.parse(SEEN_LATER[case], name="later")
    (scan,) = select_scans(program, polymap.analyze(program))
    assert scan.keeps_extreme
    rewritten = rewrite_scan(program, scan)
    rng = np.random.default_rng(8)
    arrays = {"X": rng.integers(-3, 4, size=(3, 4, 5) if case == "next step" else (4, 5)).astype(np.float32)}
    if case == "scatter index":
        arrays["K"] = rng.integers(0, 8, size=(4, 5)).astype(np.int32)
    expected, got = reference(program, **arrays), reference(rewritten, **arrays)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_passes_pinned_with_a_pin_only_the_passes_meet_map_the_passes():
    """``i.lanes=32`` needs a loop the lanes can share: the scan as written has none, its
    passes have three. With the passes pinned, or with nothing pinned, the passes are mapped
    and the form as written is reported with why it has no mapping (an adversarial review
    found the pin refused)."""
    program = polymap.load(ROOT / "models/argmax_rows.te").bind(M=8, N=37)
    for pins in ({"j": {"passes": True}, "i": {"lanes": 32}}, {"i": {"lanes": 32}}):
        mapping = polymap.optimize(program, pins=pins)
        (choice,) = mapping.scans
        assert choice.rewritten and mapping.kernels[0].lanes == 32
        (_, written, why), _ = choice.options
        assert written is None and "lanes" in why, choice.options
    with pytest.raises(ArgumentError, match="lanes"):
        polymap.optimize(program, pins={"j": {"passes": False}, "i": {"lanes": 32}})
    with pytest.raises(ArgumentError, match="'i' is a par loop"):
        polymap.optimize(program, pins={"i": {"passes": True}})


# the argmax of a whole array: the scan is a top-level loop, one thread as written
TOP = """
param N = 23
in  X: f32[N]
out best: i32
{declared}
{m} = -inf
best = 5
seq N j {{
  best = select(X[j] {cmp} {m}, j, best)
  {m} {op} X[j]
}}
"""


def _top(cmp: str = ">", op: str = "max=", seen: bool = False, size: int | None = None) -> polymap.Program:
    declared = "out mx: f32" if seen else "new mx: f32"
    program = polymap.parse(TOP.format(declared=declared, m="mx", cmp=cmp, op=op), name="top")
    return program if size is None else program.bind(N=size)


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.sampled_from(SPECIALS), min_size=23, max_size=23),
    form=st.sampled_from([(">", "max="), (">=", "max="), ("<", "min="), ("<=", "min=")]),
    seen=st.booleans(),
)
def test_a_top_level_scans_passes_give_its_result_for_every_input(values, form, seen):
    """At the top level the temporaries are program-wide buffers (each pass may be a kernel
    of its own); the passes equal the loop as written on ties, infinities, NaN and signed
    zeros, and the caller's maximum too where it is an out buffer."""
    program = _top(*form, seen=seen)
    (scan,) = select_scans(program, polymap.analyze(program))
    rewritten = rewrite_scan(program, scan)
    assert {"best_nan_at", "mx_upto", "best_at"} <= {d.name for d in rewritten.buffers}
    x = np.array(values, np.float32)
    expected, got = reference(program, X=x), reference(rewritten, X=x)
    np.testing.assert_array_equal(got["best"], expected["best"])
    if seen:
        np.testing.assert_array_equal(got["mx"], expected["mx"])
    # a program-wide new maximum read nowhere else loses its pass; an out one keeps it
    assert str(rewritten).count("seq N j") == (4 if seen else 3)


def test_the_argmax_of_a_whole_array_runs_as_split_passes_on_the_host():
    """As written a top-level scan is one thread (a serial kernel); its passes are top-level
    reductions that the splits spread over the GPU. SCIP's objective takes them, weighed
    with the splits (2^24 elements: 6.8 s of one thread against about 73 us), and the
    kernels run on the host equal to the reference and to np.argmax."""
    mapping = polymap.optimize(_top(size=1 << 24))
    (choice,) = mapping.scans
    written, passes = (objective for _, objective, _ in choice.options)
    assert choice.rewritten and passes < written / 1000, choice.describe()
    # the three passes' loops are split into parts (the first level of each)
    assert sum(1 for s in mapping.splits if s.chosen and s.loop == "j") == 3
    program = _top(size=5000)
    kernel = polymap.compile(program)
    assert kernel.mapping.scans[0].rewritten
    x = np.random.default_rng(9).integers(-50, 50, size=5000).astype(np.float32)
    got = kernel.run_host(X=x)["best"]
    assert int(got) == int(np.argmax(x)) == int(reference(program, X=x)["best"])
    x[4000] = np.nan  # positions from the first NaN on never count
    assert int(kernel.run_host(X=x)["best"]) == int(reference(program, X=x)["best"])
