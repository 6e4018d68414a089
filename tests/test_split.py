"""Reductions split into parts (``transform.split``, ``pipeline.choose_splits``): which
loops qualify, the rewrite against the reference at many sizes, SCIP's choice, pins, the
report, and host runs against NumPy (exactly for max=, min= and integer sums; within the
reassociation bound of docs/mapping.md for float sums)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import polymap
from polymap.errors import ArgumentError, VerificationError
from polymap.ir.nodes import IConst
from polymap.ir.printer import format_program
from polymap.reference import reference
from polymap.targets import H100, KIB
from polymap.transform.split import Form, Split, reduction_at
from polymap.transform.split_rewrite import split_reduction

FULL_SUM = """
param N = 262144
in  x: f32[N]
out s: f32[1]
s[0] += x[i]
"""

SPLIT_K = """
param M = 8
param N = 8
param K = 16384
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
C[i, j] += A[i, k] * B[k, j]
"""


def _reassociation_bound(terms: np.ndarray, count: int) -> float:
    """Two orders of a float32 sum of ``count`` terms are within 2 (n - 1) u sum|t|
    (docs/mapping.md, "Reductions across the lanes of a warp")."""
    u = np.finfo(np.float32).eps / 2
    return 2 * (count - 1) * u * float(np.abs(terms).astype(np.float64).sum())


def _reduction(text: str, position: int = 0, *, reassociate: bool = True):
    program = polymap.parse(text)
    return program, reduction_at(program, polymap.analyze(program), position, reassociate=reassociate)


def test_the_full_sum_is_split_by_scip_and_runs_equal_to_numpy():
    program = polymap.parse(FULL_SUM)
    mapping = polymap.optimize(program)
    taken = [c for c in mapping.splits if c.split is not None]
    assert taken, mapping.report()
    first = mapping.splits[0]
    assert first.options[0][0] == "unsplit"
    assert first.options[first.chosen][1] == min(o[1] for o in first.options if o[1] is not None)
    assert first.options[first.chosen][1] < first.options[0][1]
    # the one-thread kernel is gone: every kernel but the last combine has more than one block
    assert len(mapping.kernels) == 1 + len(taken)
    assert "split into" in mapping.report() and "reorders the float += into 's'" in mapping.report()
    # positive terms: the bound is then a fraction of the sum, so a wrong sum cannot pass it
    x = np.random.default_rng(3).random(262144).astype(np.float32)
    kernel = polymap.compile(program, mapping)
    runs = {"reference": reference(program, x=x), "host": kernel.run_host(x=x)}
    assert ".entry" in kernel.ptx()
    exact = x.astype(np.float64).sum()
    bound = _reassociation_bound(x, x.size)
    assert bound < exact / 10
    for name, out in runs.items():
        assert abs(float(out["s"][0]) - exact) <= bound, name
    assert "split into" in kernel.source and "reorders the float += into 's'" in kernel.source


def test_max_and_integer_sums_split_exactly():
    text = """
param N = 262144
in  x: f32[N]
in  c: i32[N]
out m: f32[1]
out n: i32[1]
m[0] max= x[i]
n[0] += c[i]
"""
    program = polymap.parse(text)
    mapping = polymap.optimize(program)
    split = {c.target for c in mapping.splits if c.split is not None}
    assert split == {"m", "n"}, mapping.report()
    assert "exact for 'm'" in polymap.compile(program, mapping).source
    rng = np.random.default_rng(4)
    x = rng.standard_normal(262144).astype(np.float32)
    c = rng.integers(-1000, 1000, 262144).astype(np.int32)
    out = polymap.compile(program, mapping).run_host(x=x, c=c)
    assert out["m"][0] == x.max()
    assert out["n"][0] == c.astype(np.int64).sum()


def test_a_skinny_gemm_is_split_along_k():
    # on an H100 its 512 KiB operands stay in L2, where a block of lanes per output reads
    # them as fast as the parts do (19.0 us against 22.6); without the L2 the parts win
    no_l2 = dataclasses.replace(H100, name="H100 without an L2 to speak of", l2_cache_bytes=KIB)
    program = polymap.parse(SPLIT_K)
    mapping = polymap.optimize(program, target=no_l2)
    (choice,) = [c for c in mapping.splits if c.loop == "k"]
    assert choice.split is not None and choice.split.form is Form.BLOCKED, mapping.report()
    # the parts' tiles of A and B are staged at the block's own origin: k_part one per block
    parts = mapping.kernels[0]
    assert parts.staging is not None and set(parts.staging.buffers) == {"A", "B"}
    assert [(lm.threads, lm.seq) for lm in parts.loops if lm.index == "k_part"] == [(1, 1)]
    forged_loops = tuple(
        dataclasses.replace(lm, threads=2) if lm.index == "k_part" else lm for lm in parts.loops
    )
    forged = dataclasses.replace(
        mapping, kernels=(dataclasses.replace(parts, loops=forged_loops), *mapping.kernels[1:])
    )
    with pytest.raises(VerificationError, match="no thread copies the element"):
        polymap.compile(mapping.program, forged)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 16384)).astype(np.float32)
    b = rng.standard_normal((16384, 8)).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(A=a, B=b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    terms = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    u = np.finfo(np.float32).eps / 2
    assert np.all(np.abs(out["C"] - exact) <= 2 * 16384 * u * terms)


@pytest.mark.parametrize("form", list(Form))
@pytest.mark.parametrize("parts", [2, 8])
def test_the_rewrite_equals_the_reference_at_every_size(form, parts):
    text = """
param N
param M
in  x: i32[M, N]
out s: i32[M]
out m: i32[M]
s[i] += x[i, k]
m[i] max= x[i, k] * 3 - 2
"""
    program = polymap.parse(text)
    model = polymap.analyze(program)
    for position in (0, 1):
        reduction = reduction_at(program, model, position, reassociate=True)
        split = split_reduction(program, reduction, Split(parts, form), extent=37)
        polymap.analyze(split)  # race free and in bounds for every size
        program_after = split
        for n in (0, 1, 5, 36, 37, 38, 100):
            x = np.arange(3 * n, dtype=np.int32).reshape(3, n) % 17 - 8
            want = reference(program, x=x)
            got = reference(program_after, x=x)
            assert np.array_equal(want["s"], got["s"]) and np.array_equal(want["m"], got["m"]), (position, n)


@pytest.mark.parametrize(
    "text, reason",
    [
        # a prefix sum: the running value is read
        (
            "param N\nin x: f32[N]\nout y: f32[N]\nout s: f32[1]\nseq N i { s[0] += x[i]\n y[i] = s[0] }",
            "read there",
        ),
        # a second running value beside the sum
        (
            "param N\nin x: f32[N]\nout y: f32[N]\nout s: f32[2]\nseq N i { s[0] += x[i]\n s[1] += x[i] }",
            "more than one element",
        ),
        # an element of each iteration's own beside the sum, written twice (isl: carried)
        (
            "param N\nin x: f32[N]\nout y: f32[N]\nout s: f32[1]\nseq N i { s[0] += x[i]\n y[i / 2] = x[i] }",
            "depends on another",
        ),
        ("param N\nin x: f32[N]\nout y: f32[N + 1]\nseq N i { y[i + 1] = y[i] + x[i] }", "changes with"),
        ("param N\nin x: f32[N]\nout s: f32[1]\nseq N i { s[0] -= x[i] }", "no accumulator"),
        ("param N\nin x: f64[N]\nout s: i32[1]\nseq N i { s[0] += x[i] }", "no accumulator"),
        ("param N\nin x: f32[N]\nout s: f16[1]\nseq N i { s[0] += x[i] }", "no accumulator"),
        (
            "param N\nin x: f32[N, N]\nout s: f32[N]\npar N i { seq i + 1 k { s[i] += x[i, k] } }",
            "depends on the band",
        ),
    ],
)
def test_loops_that_must_not_be_split(text, reason):
    program, found = _reduction(text)
    assert isinstance(found, str) and reason in found, found


def test_no_reassociation_keeps_a_float_sum_whole_but_splits_max():
    program, found = _reduction(FULL_SUM, reassociate=False)
    assert isinstance(found, str) and "reassociation is off" in found
    mapping = polymap.optimize(program, reassociate=False)
    assert all(c.split is None for c in mapping.splits) and len(mapping.kernels) == 1
    program, found = _reduction("param N\nin x: f32[N]\nout m: f32[1]\nm[0] max= x[i]", reassociate=False)
    assert not isinstance(found, str) and not found.reorders


def test_split_pins():
    program = polymap.parse(FULL_SUM)
    kept = polymap.optimize(program, pins={"i": {"split": 1}})
    assert len(kept.kernels) == 1 and kept.splits[0].pinned and kept.splits[0].split is None
    pinned = polymap.optimize(program, pins={"i": {"split": 64}, "i_part": {"split": 1}})
    assert pinned.splits[0].split.parts == 64 and len(pinned.kernels) == 2
    assert pinned.splits[0].options[0][0] == "unsplit" and pinned.splits[0].chosen > 0
    with pytest.raises(ArgumentError, match="power of two"):
        polymap.optimize(program, pins={"i": {"split": 3}})
    with pytest.raises(ArgumentError, match="names the reduction loop alone"):
        polymap.optimize(program, pins={"kernel0.i": {"split": 4}})
    prefix = polymap.parse(
        "param N = 4096\nin x: f32[N]\nout y: f32[N + 1]\nseq N i { y[i + 1] = y[i] + x[i] }"
    )
    with pytest.raises(ArgumentError, match="changes with loop 'i'"):
        polymap.optimize(prefix, pins={"i": {"split": 4}})


def test_a_given_split_mapping_is_proved_again_and_keeps_its_report():
    program = polymap.parse(FULL_SUM)
    mapping = polymap.optimize(program)
    kernel = polymap.compile(program, mapping)
    assert kernel.mapping.splits == mapping.splits
    assert kernel.mapping.program == mapping.program
    data = mapping.to_json()
    assert data["splits"][0]["parts"] == mapping.splits[0].split.parts


@pytest.mark.parametrize("form", list(Form))
def test_isl_proves_each_iteration_in_one_part_and_refuses_a_wrong_claim(form):
    from polymap.errors import InternalError
    from polymap.prove_split import prove_split

    text = "param N\nparam M\nin x: f32[N, M]\nout s: f32[4]\npar 4 j { seq N i { seq M r { s[j] max= x[i, r] } } }"
    program, found = _reduction(text)
    before = polymap.analyze(program)
    split = split_reduction(program, found, Split(8, form), extent=100)
    after = polymap.analyze(split)
    assert "exactly one part" in prove_split(before, after, found, Split(8, form), 100)
    # the same program said to be split into 4 parts: iterations lost or run twice
    with pytest.raises(InternalError, match="exactly once"):
        prove_split(before, after, found, Split(4, form), 100)
    # the combine of another program: a partial read twice
    doubled = polymap.parse(
        str(split).replace("s[j] max= s_parts[i_part, j]", "s[j] max= s_parts[i_part / 2, j]")
    )
    with pytest.raises(InternalError, match="each partial once"):
        prove_split(before, polymap.analyze(doubled), found, Split(8, form), 100)


def test_a_program_with_its_sizes_bound_is_split_with_numbers_for_shapes():
    text = "param M = 70\nparam N = 1000\nin X: f32[M, N]\nout y: f32[M]\npar M i { seq N j { y[i] += X[i, j] } }"
    program = polymap.parse(text).bind_defaults()
    # a warp per row (a block of 32 warps per row fills a quarter of the GPU, and SCIP's
    # first-load roof bounds it, so no split would pay there)
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32}})
    (choice,) = mapping.splits
    assert choice.split is not None, mapping.report()
    parts = next(d for d in mapping.program.buffers if d.name == "y_parts")
    assert all(isinstance(e, IConst) for e in parts.shape), parts
    x = np.random.default_rng(6).standard_normal((70, 1000)).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(X=x)
    exact = x.astype(np.float64).sum(axis=1)
    bounds = [_reassociation_bound(row, row.size) for row in x]
    assert np.all(np.abs(out["y"] - exact) <= bounds)


def test_two_reductions_into_one_target_are_each_weighed():
    text = "param N = 262144\nin x: f32[N]\nin y: f32[N]\nout s: f32[1]\ns[0] += x[i]\ns[0] += y[i]"
    program = polymap.parse(text)
    mapping = polymap.optimize(program, pins={"i_part": {"split": 1}})
    split = [c for c in mapping.splits if c.loop == "i" and c.split is not None]
    assert len(split) == 2, mapping.report()
    rng = np.random.default_rng(8)
    x, y = (rng.standard_normal(262144).astype(np.float32) for _ in range(2))
    out = polymap.compile(program, mapping).run_host(x=x, y=y)
    both = np.concatenate([x, y])
    assert abs(float(out["s"][0]) - both.astype(np.float64).sum()) <= _reassociation_bound(both, both.size)


def test_the_kernels_a_split_leaves_alone_are_solved_once(monkeypatch):
    from polymap.mapping import solve

    text = (
        "param M = 64, N = 64, L = 262144\nin A: f32[M, N]\nin x: f32[L]\nout B: f32[N, M]\nout s: f32[1]\n"
        "par M i { par N j { B[j, i] = A[i, j] } }\ns[0] += x[l]"
    )
    program = polymap.parse(text)
    solved = []
    original = solve.KernelProblem.solve_or_explain

    def counting(problem):
        solved.append(problem.kernel.band[0].index if problem.kernel.band else "serial")
        return original(problem)

    monkeypatch.setattr(solve.KernelProblem, "solve_or_explain", counting)
    mapping = polymap.optimize(program, pins={"l_part": {"split": 1}})
    assert [c.split is not None for c in mapping.splits] == [True, False], mapping.report()
    # the transpose: once, though the program was mapped once per option (unsplit, 4 splits)
    assert solved.count("i") == 1, solved
    # and its decisions are those SCIP gives the program where nothing is split
    alone = polymap.optimize(program, pins={"l": {"split": 1}})
    assert mapping.kernels[0].loops == alone.kernels[0].loops
    assert mapping.costs[0] == alone.costs[0]


def test_an_inout_target_keeps_its_value_once():
    # the parts start at the identity (+=) or at the target's own value (max=, idempotent):
    # the target's value enters the result once
    text = """
param N = 262144
in  x: f32[N]
in  c: i32[N]
inout m: f32[1]
inout n: i32[1]
m[0] max= x[i]
n[0] += c[i]
"""
    program = polymap.parse(text)
    mapping = polymap.optimize(program)
    assert {c.target for c in mapping.splits if c.split is not None} == {"m", "n"}, mapping.report()
    kernel = polymap.compile(program, mapping)
    rng = np.random.default_rng(9)
    # all negative: a part started at 0 instead of the target's value would win the max
    x = (-1 - np.abs(rng.standard_normal(262144))).astype(np.float32)
    c = rng.integers(-1000, 1000, 262144).astype(np.int32)
    for start in (x.max() + 1, x.min() - 1):
        out = kernel.run_host(x=x, c=c, m=np.array([start], np.float32), n=np.array([123456], np.int32))
        assert out["m"][0] == max(start, x.max())
        assert out["n"][0] == 123456 + c.astype(np.int64).sum()


def test_an_if_around_the_loop_keeps_it_whole():
    text = "param M = 8\nparam K = 100000\nin x: i32[M, K]\nout y: i32[4]\npar M j { if j < 4 { seq K k { y[j] += x[j, k] } } }"
    program, found = _reduction(text)
    assert isinstance(found, str) and "an if around loop 'k'" in found
    mapping = polymap.optimize(program)  # before: a BoundsError from the parts' start
    assert not mapping.splits


def test_a_blocked_split_runs_where_the_loop_runs_no_iteration():
    text = "param N = 1048576\nin x: i32[N]\nout s: i32[1]\nseq N - 1000 i { s[0] += x[i + 1000] }"
    program = polymap.parse(text)
    kernel = polymap.compile(program, pins={"i": {"split": 64}, "i_part": {"split": 1}})
    assert any(c.split is not None for c in kernel.mapping.splits)
    for n in (1, 1000, 1001, 5000):
        x = np.arange(n, dtype=np.int32)
        assert kernel.run_host(x=x)["s"][0] == x[1000:].astype(np.int64).sum(), n


def test_the_partials_are_one_per_part_and_band_point_not_per_target_element():
    text = "param N = 1048576\nparam H = 10000000\nin x: f32[N]\ninout h: f32[H]\nseq N i { h[0] += x[i] }"
    mapping = polymap.optimize(polymap.parse(text), pins={"i_part": {"split": 1}})
    (parts,) = [d for d in mapping.program.buffers if d.name == "h_parts"]
    assert len(parts.shape) == 1, parts  # (parts), not (parts, H)


def test_split_pin_mistakes_are_refused_with_the_reason():
    program = polymap.parse(FULL_SUM)
    with pytest.raises(ArgumentError, match="runs 262144 iterations"):
        polymap.optimize(program, pins={"i": {"split": 2**20}})
    with pytest.raises(ArgumentError, match="names no loop"):
        polymap.optimize(program, pins={"typo": {"split": 4}})
    elementwise = polymap.parse("param N = 4096\nin x: f32[N]\nout y: f32[N]\npar N j { y[j] = x[j] }")
    with pytest.raises(ArgumentError, match="'j' is a par loop"):
        polymap.optimize(elementwise, pins={"j": {"split": 4}})
    # the combine's loop, named in the report, may be pinned too
    mapping = polymap.optimize(program, pins={"i": {"split": 1024}, "i_part": {"split": 4}})
    assert [c.split.parts for c in mapping.splits if c.split is not None] == [1024, 4]


def test_a_kernel_pin_follows_its_kernel_past_a_split():
    text = "param N = 65536\nin x: f32[N]\nout m: f32[1]\nout y: f32[N]\nm[0] max= x[i]\npar N j { y[j] = x[j] * 2 }"
    program = polymap.parse(text)
    mapping = polymap.optimize(program, pins={"kernel1.j": {"threads": 64}, "i_part": {"split": 1}})
    assert any(c.split is not None for c in mapping.splits), mapping.report()
    (elementwise,) = [km for km in mapping.kernels if km.kernel.band and km.kernel.band[0].index == "j"]
    assert elementwise.loops[0].threads == 64


def test_a_split_made_under_a_context_is_given_back_to_compile():
    text = "param N = 262144\nparam M = 262144\nin x: f32[M]\nout s: f32[1]\nseq N i { s[0] max= x[i] }"
    program = polymap.parse(text, name="ctx")
    mapping = polymap.optimize(program, context="N <= M")
    assert any(c.split is not None for c in mapping.splits), mapping.report()
    x = np.random.default_rng(10).standard_normal(300000).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(x=x, N=262144)  # the splits replay under N <= M
    assert out["s"][0] == x[:262144].max()
    edited = dataclasses.replace(mapping, splits=(dataclasses.replace(mapping.splits[0], extent=0),))
    with pytest.raises(
        ArgumentError, match="does not hold for this program|splits of reductions do not apply"
    ):
        polymap.compile(program, edited)


def test_a_kernel_pin_on_the_reduction_loop_goes_to_the_parts_only():
    text = "param M = 32\nparam N = 32\nparam K = 16384\nin A: f32[M, K]\nin B: f32[K, N]\nout C: f32[M, N]\nC[i, j] += A[i, k] * B[k, j]"
    # a thread per point (with a block of warps per point the kernel fills the GPU unsplit)
    pins = {"kernel0.k": {"tile": 16}, "kernel0.i": {"lanes": 1}}
    mapping = polymap.optimize(polymap.parse(text), pins=pins)
    (choice,) = [c for c in mapping.splits if c.loop == "k"]
    assert choice.split is not None and all(why == "" for _, _, why in choice.options), mapping.report()
    assert mapping.kernels[0].staging is not None and mapping.kernels[0].staging.tile == 16


def test_a_report_does_not_call_unsplit_the_cheapest_when_a_split_saved_too_little():
    from polymap.mapping.result import SplitChoice

    options = (("unsplit", 100e-6, ""), ("4 cyclic parts", 99.9e-6, ""))
    kept = SplitChoice("i", "S0 `s[0] += x[i]`", "s", options, 0, 0, None, 4096, True, "+=")
    assert "the cheapest of" not in kept.describe() and "saving too little" in kept.describe()
    cheapest = dataclasses.replace(kept, options=(("unsplit", 50e-6, ""), ("4 cyclic parts", 100e-6, "")))
    assert "the cheapest of 2" in cheapest.describe()


INT_SUM = """
param N = 4194304
in  c: i32[N]
out n: i32[1]
n[0] += c[i]
"""


def test_an_integer_sum_is_split_into_parts_that_add_atomically():
    """Issue 12's atomics on the output: the parts end with an atomic update of the target,
    so one kernel does what a parts kernel and a combine kernel did; SCIP's costs choose it
    over the two-kernel forms, which are reported beside it."""
    program = polymap.parse(INT_SUM)
    mapping = polymap.optimize(program)
    (choice,) = [c for c in mapping.splits if c.split is not None]
    assert choice.split.atomic and len(mapping.kernels) == 1, mapping.report()
    described = [what for what, _, _ in choice.options]
    assert any("added atomically" in w for w in described) and any(
        "parts" in w and "atomically" not in w for w in described
    )
    assert "added atomically, no combine kernel" in mapping.report()
    # the parts' updates of n[0] one after another: the atomics roof, in SCIP's objective too
    (cost,) = mapping.costs
    assert cost.atomic_s == pytest.approx(choice.split.parts / mapping.target.clock_hz)
    assert "atomics" in cost.roofs_text() and mapping.solver[0].objective == pytest.approx(
        cost.objective_s * 1e6
    )
    assert "each part's atomic update reads its partial once" in mapping.report()
    assert mapping.to_json()["splits"][0]["atomic"] is True
    c = np.random.default_rng(5).integers(-(2**31), 2**31 - 1, 4194304).astype(np.int32)
    kernel = polymap.compile(program, mapping)  # the given mapping replays the atomic split
    assert kernel.mapping.splits == mapping.splits
    want = np.array([c.astype(np.int64).sum()]).astype(np.int32)  # wraps as C's i32 does
    np.testing.assert_array_equal(kernel.run_host(c=c)["n"], want)
    np.testing.assert_array_equal(reference(kernel.mapping.program, c=c)["n"], want)
    assert "pm_atomic_add(&n[0]" in kernel.source and ".entry" in kernel.ptx()


def test_a_float_sum_splits_atomically_only_with_deterministic_off():
    program = polymap.parse(FULL_SUM)
    plain = polymap.optimize(program)
    assert not any("atomically" in what for c in plain.splits for what, _, _ in c.options)
    mapping = polymap.optimize(program, deterministic=False)
    (choice,) = [c for c in mapping.splits if c.split is not None]
    assert choice.split.atomic and len(mapping.kernels) == 1, mapping.report()
    assert "varies from run to run" in mapping.report()
    x = np.random.default_rng(6).random(262144).astype(np.float32)
    got = polymap.compile(program, mapping).run_host(x=x)["s"][0]
    assert abs(float(got) - x.astype(np.float64).sum()) <= _reassociation_bound(x, x.size)


def test_isl_proves_an_atomic_split_and_refuses_a_wrong_claim():
    from polymap.errors import InternalError
    from polymap.prove_split import prove_split

    text = "param N\nin x: i32[N]\nout s: i32[4]\npar 4 j { seq N i { s[j] += x[i] } }"
    program, found = _reduction(text)
    how = Split(8, Form.BLOCKED, atomic=True)
    split = split_reduction(program, found, how, extent=100)
    # each part's partial in a register of its thread, added once at the end of the part
    assert "new s_parts: i32" in str(split) and "atomic s[j] += s_parts\n" in str(split)
    assert [b.name for b in split.buffers] == ["x", "s"]
    before = polymap.analyze(program)
    assert "atomic update reads its partial once" in prove_split(
        before, polymap.analyze(split), found, how, 100
    )
    # the same program said to be split into 4 parts: iterations lost or run twice
    with pytest.raises(InternalError, match="exactly once"):
        prove_split(before, polymap.analyze(split), found, Split(4, Form.BLOCKED, atomic=True), 100)


def test_a_mapping_with_atomic_parts_given_to_a_max_program_is_an_argument_error():
    # (a review: the split's rewrite refused it with an InternalError, "a bug in polymap")
    mapping = polymap.optimize(polymap.parse(INT_SUM, name="z"))
    assert mapping.splits[0].split.atomic
    other = polymap.parse(INT_SUM.replace("n[0] += c[i]", "n[0] max= c[i]"), name="z")
    with pytest.raises(ArgumentError, match="another program named 'z'.*splits of reductions do not apply"):
        polymap.compile(other, mapping)


COLUMN_SUM = """
param M = 8192
param N = 8192
in  X: f32[M, N]
out c: f32[N]
par N j { seq M i { c[j] += X[i, j] } }
"""


def test_a_column_sum_read_across_lanes_is_split_so_its_reads_coalesce():
    """A column sum fills the GPU with lanes over i (2 warps per column), but neighbouring
    lanes read rows apart: a sector each. SCIP's costs choose the split instead (parts of i
    over blocks, threads along j, reads coalesced), though the unsplit kernel fills the GPU."""
    program = polymap.parse(COLUMN_SUM)
    mapping = polymap.optimize(program)
    (choice,) = [c for c in mapping.splits if c.loop == "i"]  # (its combine is weighed too)
    assert choice.split is not None, mapping.report()
    unsplit, taken = choice.options[0][1], choice.options[choice.chosen][1]
    assert taken < unsplit / 4, mapping.report()  # a sector per lane against 4 per warp
    reads = [a for c in mapping.costs for a in c.accesses if a.access.startswith("X[") and not a.is_write]
    assert reads and all(abs(a.lane_stride) <= 1 for a in reads), mapping.report()
    x = np.random.default_rng(5).random((600, 300)).astype(np.float32)
    kernel = polymap.compile(program, mapping)
    exact = x.astype(np.float64).sum(axis=0)
    bound = np.array([_reassociation_bound(x[:, j], 600) for j in range(300)])  # per column
    for name, out in {"reference": reference(program, X=x), "host": kernel.run_host(X=x)}.items():
        assert np.all(np.abs(out["c"] - exact) <= bound), name


# Statements around the loop in its band (transform.split, "Statements around the loop"):
# a start before it, a block-local accumulator stored after it, an epilogue that reads the
# result. Integer sums and max=, so the rewrite must equal the program exactly.
AROUND = [
    # a GEMM-like init, and an epilogue reading the sum and writing a second buffer
    "out s: i32[M]\nout d: i32[M]\npar M i { s[i] = 5\n seq N k { s[i] += x[i, k] }\n d[i] = s[i] * 2 - 1 }",
    # a block-local accumulator, started from a read, stored by the epilogue
    "out s: i32[M]\npar M i { new acc: i32\n acc = x[i, 0] * 0 + i\n seq N k { acc += x[i, k] * 3 }\n s[i] = acc }",
    # a max= whose start the prologue gives: every part starts there
    "out m: i32[M]\npar M i { m[i] = 0 - 100\n seq N k { m[i] max= x[i, k] }\n m[i] = m[i] + 1 }",
    # a max= from a start read in the row (the parts evaluate it again)
    "out m: i32[M]\npar M i { new mx: i32\n mx = x[i, 0]\n seq N k { mx min= x[i, k] }\n m[i] = mx }",
    # an update before the loop and an if on the band around it: a += only runs the combine's
    "inout s: i32[M]\npar M i { if i < 2 { s[i] += 7 }\n seq N k { s[i] += x[i, k] } }",
]


@pytest.mark.parametrize("form", list(Form))
@pytest.mark.parametrize("body", AROUND)
def test_statements_around_the_loop_move_into_the_combine(form, body):
    program = polymap.parse(f"param N\nparam M\nin x: i32[M, N]\n{body}")
    found = reduction_at(program, polymap.analyze(program), 0, reassociate=True)
    assert not isinstance(found, str), found
    split = split_reduction(program, found, Split(4, form), extent=37)
    polymap.analyze(split)  # race free and in bounds for every size
    combine = split.body[1]
    texts = [str(stmt) for stmt in combine.body]  # (statements are renumbered)
    assert texts[: len(found.prologue)] == [str(stmt) for stmt in found.prologue]
    assert texts[len(texts) - len(found.epilogue) :] == [str(stmt) for stmt in found.epilogue]
    outputs = [d.name for d in program.buffers if d.kind.value != "in"]
    for n in (1, 2, 5, 36, 37, 38, 100):  # around the chunk (37 / 4) and the part count
        x = (np.arange(3 * n, dtype=np.int32).reshape(3, n) * 7) % 23 - 11
        inputs = {"x": x, "s": np.array([3, -4, 9], dtype=np.int32)} if "inout" in body else {"x": x}
        want, got = reference(program, **inputs), reference(split, **inputs)
        for name in outputs:
            assert np.array_equal(want[name], got[name]), (name, n)


@pytest.mark.parametrize(
    "body, reason",
    [
        # the start reads the target: the parts, run first, would see it before the prologue
        ("out m: f32[M]\npar M i { m[i] = m[i] * 2\n seq N k { m[i] max= x[i, k] } }", "one start"),
        ("out m: f32[M]\npar M i { m[i] = 0\n m[i] = x[i, 0]\n seq N k { m[i] max= x[i, k] } }", "one start"),
        ("out m: f32[M]\npar M i { if i < 2 { m[i] = 0 }\n seq N k { m[i] max= x[i, k] } }", "one start"),
        # the prologue writes another buffer
        (
            "out s: f32[M]\nout t: f32[M]\npar M i { t[i] = 1\n s[i] = 0\n seq N k { s[i] += x[i, k] } }",
            "else",
        ),
        # a loop after it that uses an array of the band (its nest takes 0-d values only)
        (
            "out s: f32[M]\nout y: f32[M, N]\npar M i { new r: f32[2]\n r[0] = 1\n s[i] = 0\n"
            " seq N k { s[i] += x[i, k] }\n par N j { y[i, j] = x[i, j] / s[i] + r[0] } }",
            "the array 'r'",
        ),
        # a par loop first: no reduction loop starts its body
        (
            "out y: f32[M, N]\npar M i { par N j { y[i, j] = 0 }\n seq N k { y[i, 0] += x[i, k] } }",
            "does not start",
        ),
    ],
)
def test_statements_around_the_loop_that_keep_it_whole(body, reason):
    program = polymap.parse(f"param N\nparam M\nin x: f32[M, N]\n{body}")
    found = reduction_at(program, polymap.analyze(program), 0, reassociate=True)
    assert isinstance(found, str) and reason in found, found


def test_a_gemm_written_with_its_init_in_the_band_is_split_and_runs():
    # the skinny GEMM as people write it: the output set to zero (here a bias) before its k
    # loop, and a ReLU after it, in one nest
    text = """
param M = 8
param N = 8
param K = 16384
in  A: f32[M, K]
in  B: f32[K, N]
in  bias: f32[N]
out C: f32[M, N]
par M i {
  par N j {
    new acc: f32
    acc = bias[j]
    seq K k {
      acc += A[i, k] * B[k, j]
    }
    C[i, j] = max(acc, 0)
  }
}
"""
    no_l2 = dataclasses.replace(H100, name="H100 without an L2 to speak of", l2_cache_bytes=KIB)
    program = polymap.parse(text)
    mapping = polymap.optimize(program, target=no_l2)
    (choice,) = [c for c in mapping.splits if c.loop == "k"]
    assert choice.split is not None, mapping.report()
    assert choice.options[choice.chosen][1] < 0.6 * choice.options[0][1], mapping.report()
    rng = np.random.default_rng(6)
    a = rng.standard_normal((8, 16384)).astype(np.float32)
    b = rng.standard_normal((16384, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(A=a, B=b, bias=bias)
    exact = a.astype(np.float64) @ b.astype(np.float64) + bias
    terms = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + np.abs(bias)
    u = np.finfo(np.float32).eps / 2
    relu = np.maximum(exact, 0)
    # the ReLU moves no value further from the exact one
    assert np.all(np.abs(out["C"] - relu) <= 2 * 16384 * u * terms)
    assert np.any(out["C"] == 0) and np.any(out["C"] > 0)


def test_parts_shorter_than_256_iterations_where_longer_ones_leave_the_gpu_empty():
    """A sum over the batch of 4096 x 64 x 64: 4096 outputs, so 66 parts fill the GPU, but
    parts of at least 256 iterations are 16 at most (a quarter of the GPU). The counts cut
    by that cap are tried with parts of 32 iterations too, and SCIP's costs take one."""
    from polymap.split_choice import _part_counts

    assert _part_counts(1.0, 128, 32, 4096, scattered=True) == (16, 128, 32)
    assert _part_counts(1.0, 128, 32, 1 << 20, scattered=True) == (128, 32)  # nothing cut
    assert _part_counts(1.0, 128, 32, 500, scattered=True) == ()  # too short for two long parts
    text = """
param B = 4096
param N = 64
param D = 64
in  X: f32[B, N, D]
out s: f32[N, D]
par N j { par D d { s[j, d] = 0
  seq B b { s[j, d] += X[b, j, d] } } }
"""
    program = polymap.parse(text)
    mapping = polymap.optimize(program)
    (choice,) = [c for c in mapping.splits if c.loop == "b"]
    assert choice.split is not None and choice.split.parts > 16, mapping.report()
    long_parts = min(o[1] for o in choice.options if o[0].startswith("16 "))
    assert choice.options[choice.chosen][1] < long_parts / 2, mapping.report()
    x = np.random.default_rng(8).random((700, 8, 8)).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(X=x)
    exact = x.astype(np.float64).sum(axis=0)
    assert np.all(np.abs(out["s"] - exact) <= 2 * 700 * np.finfo(np.float32).eps / 2 * exact)


@pytest.mark.parametrize("form", list(Form))
@pytest.mark.parametrize(
    "body",
    [
        "out s: i32[1]\nseq M i { seq N j { s[0] += x[i, j] * 3 - j } }",
        "out m: i32[1]\nseq M i { seq N j { m[0] max= x[i, j] - i } }",
        # a band, statements around the loop, and a loop inside the inner one
        "out s: i32[3]\npar 3 b { s[b] = b\n seq M i { seq N j { seq 2 r { s[b] += x[i, j] * (b + r) } } }\n"
        " s[b] = s[b] * 2 }",
    ],
)
def test_an_inner_loop_gives_the_partials_a_dimension(form, body):
    """``Split.inner``: the loop inside the reduction loop runs as a par loop of the parts,
    a partial per part and iteration of it, combined with the inner loop outermost; exact
    for integer sums and max= at every size, and proved by isl."""
    from polymap.prove_split import prove_split

    program = polymap.parse(f"param N\nparam M\nin x: i32[M, N]\n{body}")
    before = polymap.analyze(program)
    found = reduction_at(program, before, 0, reassociate=True)
    assert not isinstance(found, str) and found.inner is not None and found.inner.index == "j", found
    how = Split(4, form, inner=True)
    split = split_reduction(program, found, how, extent=37)
    text = format_program(split)
    assert "par N j {" in text and "seq N j {" in text, text  # a par loop of the parts, the combine's seq
    assert "exactly one part" in prove_split(before, polymap.analyze(split), found, how, 37)
    for m, n in ((1, 1), (2, 5), (36, 3), (37, 2), (38, 7), (100, 1)):
        x = (np.arange(m * n, dtype=np.int32).reshape(m, n) * 7) % 23 - 11
        want, got = reference(program, x=x), reference(split, x=x)
        name = program.buffers[-1].name
        assert np.array_equal(want[name], got[name]), (m, n)
    # the proof maps each of the parts' instances to the loop's: a wrong claim fails it
    from polymap.errors import InternalError

    with pytest.raises(InternalError, match="exactly once"):
        prove_split(before, polymap.analyze(split), found, Split(8, form, inner=True), 37)


def test_a_triangle_inner_loop_stays_a_seq_loop_of_the_parts():
    program, found = _reduction(
        "param N\nin x: f32[N, N]\nout s: f32[1]\nseq N i { seq i + 1 j { s[0] += x[i, j] } }"
    )
    assert not isinstance(found, str) and found.inner is None


def test_a_whole_matrix_sum_is_split_along_rows_read_by_their_columns():
    """``s += X[i, j]`` over a 16384 x 4096 matrix: split into parts of i alone, each part
    reads its rows (10580 us predicted with 64 parts, 652.8 us with a part per row); with
    the parts by the inner loop's iterations, neighbouring threads read neighbouring
    elements."""
    program = polymap.parse("param M = 16384\nparam N = 4096\nin X: f32[M, N]\nout s: f32\ns += X[i, j]")
    mapping = polymap.optimize(program)
    (choice,) = [c for c in mapping.splits if c.loop == "i"]
    assert choice.split is not None and choice.split.inner, mapping.report()
    plain = min(o[1] for o in choice.options[1:] if "inner" not in o[0])
    assert choice.options[choice.chosen][1] < plain / 3, mapping.report()
    # the combine is split again along j: the program at its DRAM roof (80.44 us), give or take
    assert sum(c.time_s for c in mapping.costs) < 100e-6, mapping.report()
    x = np.random.default_rng(9).random((300, 70)).astype(np.float32)
    out = polymap.compile(program, mapping).run_host(X=x)
    exact = x.astype(np.float64).sum()
    assert abs(float(out["s"]) - exact) <= _reassociation_bound(x, x.size)


def test_a_spread_loop_shorter_than_a_warp_is_charged_a_request_per_busy_lane_group():
    """Rows of 8 summed by a warp each (pinned): 8 lanes have work, so a request reads the
    row's 8 floats (one sector) and serves 8 instances, not 32 (cost_model.lane_busy). The
    model's bytes are then the data's; charged as 32 lanes sharing a request, they were a
    quarter of them, below what DRAM must move."""
    program = polymap.parse(
        "param M = 65536\nin X: f32[M, 8]\nout s: f32[M]\n"
        "par M i { new acc: f32\n acc = 0\n seq 8 j { acc += X[i, j] }\n s[i] = acc }"
    )
    mapping = polymap.optimize(program, pins={"i": {"lanes": 32}})
    (row,) = [a for a in mapping.costs[0].accesses if a.access.startswith("X[")]
    assert (row.sectors_per_request, row.requests) == (1, 65536 * 8 // 8), mapping.report()
    assert row.bytes == 65536 * 8 * 4
    assert mapping.costs[0].memory_s >= 65536 * 8 * 4 / H100.dram_bandwidth


def test_inner_splits_are_tried_for_a_short_outer_loop_and_count_the_work_inside():
    """(From a review) 128 rows of 2^21: parts of the rows alone fill little of the GPU, and
    the rows are too few for two parts of 256 iterations; split by the inner loop's
    iterations, parts of 32 rows are allowed (the inner loop multiplies the threads)."""
    from polymap.split_choice import _part_counts

    assert _part_counts(1e-6, 1, 32, 128) == ()
    assert _part_counts(1e-6, 1, 32, 128, short=True) == (4,)
    program = polymap.parse("param M = 128\nparam N = 2097152\nin X: f32[M, N]\nout s: f32\ns += X[i, j]")
    mapping = polymap.optimize(program)
    (choice,) = [c for c in mapping.splits if c.loop == "i"]
    assert choice.split is not None and choice.split.inner, mapping.report()
    assert sum(c.time_s for c in mapping.costs) < 1000e-6, mapping.report()  # 1 GiB: DRAM roof 320 us


def test_a_mapping_split_by_an_inner_loop_given_to_a_program_without_one_is_refused():
    """(From a review) the same sum over a triangle (the inner loop's extent mentions i: no
    inner split there): an ArgumentError that the splits do not apply, not an InternalError."""
    text = "param M = 16384\nparam N = 4096\nin X: i32[M, N]\nout s: i32[1]\nseq M i {{ seq {} j {{ s[0] += X[i, j] }} }}"
    mapping = polymap.optimize(polymap.parse(text.format("N")))
    assert any(c.split is not None and c.split.inner for c in mapping.splits), mapping.report()
    with pytest.raises(ArgumentError, match="do not apply to this program"):
        polymap.compile(polymap.parse(text.format("min(N, i + 1)")), mapping)
