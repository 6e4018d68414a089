"""The fusion planner: reading chains, SCIP against enumeration, exact accounting, errors."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from plan_oracle import best_bytes, nest_cost

import polymap
from polymap.cli import main
from polymap.errors import ArgumentError, CapacityError, PlanError, UninitializedReadError
from polymap.fused import choose_fusion
from polymap.ir.printer import format_program
from polymap.plan.chain import read_chain
from polymap.plan.frontier import STRATEGIES, capacity_list, frontier
from polymap.plan.planner import Capacity, plan
from polymap.plan.program import checked_planned_program, counted_traffic, fused_program, planned_program
from polymap.plan.tree import Level, LinkMode, Loop

MODELS = Path(__file__).resolve().parent.parent / "models"

FFN = """
param M = 4
param D = 2
param F = 2
in X: f32[M, D]
in W1: f32[D, F]
in W2: f32[F, D]
new H: f32[M, F]
out Y: f32[M, D]
H[m, f] = 0
H[m, f] += X[m, d] * W1[d, f]
Y[m, e] += H[m, f] * W2[f, e]
"""

ATTENTION = """
in X: f32[2, 2]
in Wq: f32[2, 2]
in K: f32[2, 2]
in V: f32[2, 2]
new Q: f32[2, 2]
new S: f32[2, 2]
out O: f32[2, 2]
Q[s, d] = 0
Q[s, d] += X[s, e] * Wq[e, d]
S[s, t] = 0
S[s, t] += Q[s, d] * K[t, d]
O[s, d] += S[s, t] * V[t, d]
"""

# per-batch weights: b indexes every tensor of both einsums (a batch or head rank)
BATCHED_FFN = """
in X: f32[2, 2, 2]
in W1: f32[2, 2, 2]
in W2: f32[2, 2, 2]
new H: f32[2, 2, 2]
out Y: f32[2, 2, 2]
H[b, m, f] = 0
H[b, m, f] += X[b, m, d] * W1[b, d, f]
Y[b, m, e] += H[b, m, f] * W2[b, f, e]
"""

# two primes in one size and two element sizes
MATMUL_MIXED = """
in A: f32[6, 2]
in B: f64[2, 3]
out C: f32[6, 3]
C[i, j] += A[i, k] * B[k, j]
"""

FC = """
in A: f32[4, 2]
in B: f32[2, 2]
in bias: f32[2]
out C: f32[4, 2]
C[i, j] += A[i, k] * B[k, j]
C[i, j] = max(C[i, j] + bias[j], 0)
"""


# ------------------------------------------------------------------ reading the chain


def test_the_attention_chain_is_three_einsums_joined_by_q_and_s():
    chain = read_chain(polymap.load(MODELS / "gpt3_attention_tiny.te"))
    assert [e.statements for e in chain.einsums] == [("S0", "S1"), ("S2", "S3"), ("S4",)]
    qk = chain.einsums[1]
    assert [(d.name, d.size, d.reduction) for d in qk.dims] == [
        ("s", 32, False),
        ("t", 32, False),
        ("d", 128, True),
    ]
    assert [t.text for t in qk.tensors] == ["Q[s, d]", "K[t, d]", "S[s, t]"]
    assert [link.buffer for link in chain.links] == ["Q", "S"]
    assert chain.links[1].dim_pairs == (("s", "s"), ("t", "t"))
    assert chain.conflicts == ()


def test_an_epilogue_in_place_is_a_link_and_an_intermediate_read_twice_is_not():
    fc = read_chain(polymap.load(MODELS / "fc_bias_relu.te"))
    assert [link.buffer for link in fc.links] == ["C"]
    twice = read_chain(
        polymap.parse(
            "in A: f32[4]\nnew T: f32[4]\nnew U: f32[4]\nout B: f32[4]\n"
            "T[i] = A[i] * 2\nU[i] = T[i] + 1\nB[i] = U[i] + T[i]\n"
        )
    )
    assert twice.links[0] is None  # T is read by the third einsum too: it must reach DRAM
    assert twice.links[1].buffer == "U"
    assert [(j, k) for j, k, _ in twice.conflicts] == [(0, 1), (0, 2)]  # T, written then read unlinked


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("in A: f32[8]\nout B: f32[8]\npar 7 i { B[i + 1] = A[i] }\n", "indexes B with `i + 1`: the planner"),
        ("in A: f32[8]\nout B: f32[8]\npar 7 i { B[i + 1] = A[i] }\n", "(affine combinations such as i + k"),
        (
            "in A: f32[8]\nout B: f32[4]\npar 4 i { B[i] = A[i // 2] }\n",
            "(quasi-affine indices (with // or %)",
        ),
        ("in A: f32[8, 8]\nout B: f32[8]\npar 8 i { B[i] = A[i, i] }\n", "indexes A twice with 'i'"),
        ("in A: f32[8]\nout B: f32[1]\nseq 8 i { B[0] = A[i] }\n", "indexes B with `0`: the planner"),
        ("in A: f32[8]\nout B: f32[1]\nseq 8 i { B[0] = A[i] }\n", "(a constant index is not"),
        ("in A: f32[8]\nout B: f32[8]\npar 8 i { if i < 4 { B[i] = A[i] } }\n", "runs under a condition"),
        ("in A: f32[8, 4]\nout B: f32[8]\npar 8 i { seq 4 k { B[i] = A[i, k] } }\n", "only the last value"),
    ],
)
def test_programs_outside_the_class_get_a_located_plan_error(source, words):
    with pytest.raises(PlanError, match="does not apply") as err:
        plan(polymap.parse(source), 64)
    assert words in str(err.value)
    assert err.value.loc is not None


def test_unbound_sizes_are_named():
    with pytest.raises(PlanError, match="bind N"):
        plan(polymap.parse("param N\nin A: f32[N]\nout B: f32[N]\nB[i] = A[i]\n"), 64)


# ------------------------------------------------------------- SCIP against enumeration


@pytest.mark.parametrize(
    ("source", "capacity"),
    [
        (MATMUL_MIXED, 4),
        (FC, 6),
        (FFN, 8),
        (ATTENTION, 10),
        (BATCHED_FFN, 6),
    ],
)
def test_scip_finds_the_fewest_bytes_that_enumeration_finds(source, capacity):
    program = polymap.parse(source)
    expected = best_bytes(read_chain(program), capacity)
    result = plan(program, capacity)
    assert result.report.optimal
    assert result.bytes == expected
    assert max(result.accounting.footprints) <= capacity


def test_a_batch_rank_stays_outside_every_level():
    """Orojenesis' rule: b indexes every tensor, so no tensor reuses data along it, and its
    factors stay outside every level (or in the band, where a tiled intermediate needs
    them); the enumeration above, which has no such rule, finds the same bytes."""
    from polymap.plan.formulation import build

    program = polymap.parse(BATCHED_FFN)
    # in the model: b's factor inside a level is infeasible where H is written back, and
    # feasible where H is tiled (its tile then holds b's extent under the band)
    for mode, status in ((LinkMode.DRAM, "infeasible"), (LinkMode.TILED, "optimal")):
        model = build(read_chain(program), 64, bytes_unit=False, modes={0: mode})
        model.scip.addCons(model.einsums[0].exps["b", 1, 2] >= 1)
        model.scip.optimize()
        assert model.scip.getStatus() == status, mode
    for capacity, strategy in ((6, "tiled"), (6, "untiled"), (12, "untiled"), (12, "unfused")):
        result = plan(program, capacity, strategy=strategy)
        for nest in result.nests:
            first_level = next(k for k, item in enumerate(nest.items) if isinstance(item, Level))
            inner = [item for item in nest.items[first_level:] if isinstance(item, Loop) and item.dim == "b"]
            assert not inner, (capacity, nest)


@pytest.mark.parametrize(
    ("source", "capacity", "tiles"), [(FFN, 8, 4), (ATTENTION, 10, 2), (ATTENTION, 12, 4)]
)
def test_a_floor_on_the_band_tiles_keeps_scip_equal_to_enumeration(source, capacity, tiles):
    """``min_band_tiles``: a segment fused a tile at a time has at least that many band
    tiles (a GPU's blocks); the enumeration drops every plan whose band has fewer."""
    program = polymap.parse(source)
    chain = read_chain(program)
    result = plan(program, capacity, min_band_tiles=tiles)
    assert result.report.optimal and result.bytes == best_bytes(chain, capacity, min_band_tiles=tiles)
    for group in result.segments:
        if len(group) > 1:
            assert math.prod(loop.factor for loop in result.nests[group[0]].band) >= tiles
    assert result.to_json()["min_band_tiles"] == tiles
    assert f"in at least {tiles} band tiles" in str(result).splitlines()[0]


def test_a_band_floor_no_segment_can_reach_leaves_every_link_untiled(capsys):
    program = polymap.parse(ATTENTION)  # every extent is 2: a band has at most 4 tiles
    assert LinkMode.TILED not in plan(program, 10, min_band_tiles=8).modes
    with pytest.raises(CapacityError, match="and bands of at least 8 tiles"):
        plan(program, 10, links={"S": "tiled"}, min_band_tiles=8)
    with pytest.raises(ArgumentError, match="min_band_tiles must be a whole number >= 1, got 0"):
        plan(program, 10, min_band_tiles=0)
    tiny = str(MODELS / "gpt3_attention_tiny.te")
    assert main(["plan", tiny, "--capacity", "1K", "--min-band-tiles", "132", "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["min_band_tiles"] == 132


@pytest.mark.slow
@pytest.mark.parametrize("source", [MATMUL_MIXED, FC, FFN, ATTENTION, BATCHED_FFN])
@pytest.mark.parametrize("capacity", [3, 4, 5, 6, 8, 12, 16, 24])
def test_scip_against_enumeration_over_capacities(source, capacity):
    program = polymap.parse(source)
    expected = best_bytes(read_chain(program), capacity)
    if expected is None:
        with pytest.raises(PlanError):
            plan(program, capacity)
    else:
        assert plan(program, capacity).bytes == expected


def _walk(chain, result):
    """The traffic of each tensor of the plan, walked point by point by the oracle."""
    walked = {}
    for e, (einsum, nest) in enumerate(zip(chain.einsums, result.nests, strict=True)):
        order = [item.tensor for item in nest.items if isinstance(item, Level)]
        skip = set(range(len(einsum.tensors))) - set(order)
        order += sorted(skip)  # no level: the oracle costs none of them
        buckets = {d.name: [1] * (len(order) + 1) for d in einsum.dims}
        b = 0
        for item in nest.items:
            if isinstance(item, Level):
                b += 1
            else:
                buckets[item.dim][b] *= item.factor
        band = {loop.dim: loop.factor for loop in nest.band}
        traffic, tiles = nest_cost(einsum, band, order, buckets, skip)
        walked.update({(e, t): (traffic[t], tiles[t]) for t in traffic})
    return walked


@pytest.mark.parametrize(("source", "capacity"), [(FFN, 8), (ATTENTION, 10), (FC, 6), (MATMUL_MIXED, 4)])
def test_the_traffic_a_plan_claims_is_what_walking_its_loops_counts(source, capacity):
    program = polymap.parse(source)
    chain = read_chain(program)
    result = plan(program, capacity)
    walked = _walk(chain, result)
    for cost in result.accounting.tensors:
        if (cost.einsum, cost.tensor) in walked:
            traffic, tile = walked[cost.einsum, cost.tensor]
            assert cost.tile == tile, cost
            if cost.where != "tiled":  # a fused intermediate's level moves nothing off chip
                assert cost.reads + cost.writes == traffic, cost


# ------------------------------------------------------------------ values by hand


def test_with_room_for_everything_each_tensor_moves_once_and_the_intermediate_never():
    result = plan(polymap.parse(FFN), 64)
    # X 4x2, W1 2x2, W2 2x2, Y 4x2 once each, 4 bytes an element; H never leaves chip
    assert result.bytes == (8 + 4 + 4 + 8) * 4
    assert result.link_modes()["H"] is not LinkMode.DRAM


def test_pinning_an_intermediate_to_dram_costs_its_write_and_its_read():
    result = plan(polymap.parse(FFN), 64, links={"H": "dram"})
    assert result.link_modes() == {"H": LinkMode.DRAM}
    assert result.bytes == (8 + 4 + 4 + 8 + 8 + 8) * 4  # H (4x2) written and read once more


def test_a_capacity_too_small_for_fusion_gives_the_unfused_plan():
    # every einsum fits in 3 elements only with a tile of one element each: no room for H
    result = plan(polymap.parse(FFN), 3)
    assert result.link_modes() == {"H": LinkMode.DRAM}
    assert max(result.accounting.footprints) == 3


def test_a_capacity_below_one_element_of_each_tensor_is_a_clear_error():
    with pytest.raises(
        PlanError, match=r"needs at the least: one element of each of its 3 tensors \(3 elements\)"
    ):
        plan(polymap.parse(FFN), 2)
    with pytest.raises(PlanError, match=r"\(12 bytes\)"):
        plan(polymap.parse(FFN), "11B")


def test_a_fused_band_splits_the_shared_rank_in_both_einsums():
    program = polymap.load(MODELS / "fc_bias_relu.te")
    result = plan(program, "64KiB")
    assert result.link_modes() == {"C": LinkMode.TILED}
    gemm, epilogue = result.nests
    assert gemm.band == epilogue.band  # the same dims, i and j, in both
    assert {loop.dim for loop in gemm.band} <= {"i", "j"}
    for einsum, nest in zip(result.chain.einsums, result.nests, strict=True):
        for d in einsum.dims:
            loops = [i for i in nest.band + nest.items if isinstance(i, Loop) and i.dim == d.name]
            assert math.prod(loop.factor for loop in loops) == d.size


# ------------------------------------------------------------------ pins and capacity


def test_pins_that_cannot_hold_are_named():
    with pytest.raises(PlanError, match="not an intermediate"):
        plan(polymap.parse(FFN), 64, links={"X": "tiled"})
    # an input or output goes through DRAM whatever the plan: a pin of it would pin nothing
    for buffer in ("X", "Y"):
        with pytest.raises(
            PlanError, match=f"cannot link '{buffer}': it is not an intermediate .*those are: H"
        ):
            plan(polymap.parse(FFN), 64, links={buffer: "dram"})
    with pytest.raises(ArgumentError, match="expected dram, tiled or whole"):
        plan(polymap.parse(FFN), 64, links={"H": "fused"})
    with pytest.raises(PlanError, match="H=whole"):
        plan(polymap.parse(FFN), 4, links={"H": "whole"})


@pytest.mark.parametrize(
    ("text", "amount", "in_bytes"),
    [
        ("16384", 16384, False),
        ("16K", 16384, False),
        ("512k", 524288, False),
        ("64KiB", 65536, True),
        ("4096B", 4096, True),
    ],
)
def test_capacity_text(text, amount, in_bytes):
    assert Capacity.parse(text) == Capacity(amount, in_bytes)


@pytest.mark.parametrize("text", ["0", "-4", "16 Q", "", True])
def test_bad_capacity_text_is_an_argument_error(text):
    with pytest.raises(ArgumentError, match="capacity"):
        Capacity.parse(text)


# ------------------------------------------------------------------ the command


def test_the_plan_command_prints_the_tree_the_traffic_and_scip(capsys):
    assert main(["plan", str(MODELS / "gpt3_attention_tiny.te"), "--capacity", "16K", "-q"]) == 0
    out = capsys.readouterr().out
    assert "SCIP: optimal" in out
    assert "capacity 16384 elements" in out
    assert "S4: O[s, d] += S[s, t] * V[t, d]" in out
    total = int(next(line for line in out.splitlines() if line.startswith("total")).split()[-1])
    # X, Wq, K, V read once and O written once: 5 arrays of 32x128 or 128x128 floats
    assert total == (32 * 128 * 3 + 128 * 128 + 32 * 128) * 4


def test_the_plan_command_reports_errors_without_a_traceback(capsys):
    assert main(["plan", str(MODELS / "softmax_rows.te"), "--capacity", "8K", "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "block-local buffer 'mx'" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["plan", str(MODELS / "gpt3_attention_tiny.te"), "--capacity", "8K", "--link", "Q=maybe"])
    # both planner commands read a time limit the same way: a positive number of seconds
    for command in (["plan", "--capacity", "8K"], ["frontier", "--capacities", "4K"]):
        with pytest.raises(SystemExit):
            main([*command, str(MODELS / "gpt3_attention_tiny.te"), "--time-limit", "-1"])
        assert "expected a positive number of seconds, got '-1'" in capsys.readouterr().err


def test_the_json_report_has_the_text_report_numbers(capsys):
    import json

    assert main(["plan", str(MODELS / "fc_bias_relu.te"), "--capacity", "64KiB", "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capacity"] == {"amount": 65536, "unit": "bytes"}
    assert data["scip"]["status"] == "optimal"
    rows = [t for e in data["einsums"] for t in e["tensors"]]
    assert data["bytes"] == sum(t["bytes"] for t in rows)
    assert abs(data["scip"]["objective_bytes"] - data["bytes"]) <= 1e-5 * data["bytes"]
    assert all(e["footprint"] <= 65536 for e in data["einsums"])


# ------------------------------------------------------------------ the frontier


def test_the_frontier_falls_with_capacity_and_a_wider_space_is_never_worse():
    result = frontier(polymap.parse(FFN), [2, 3, 6, 12, 64])
    assert result.point("tiled", 2).plan is None  # below one element of each tensor
    for strategy in STRATEGIES:
        values = [result.point(strategy, c).bytes for c in result.capacities[1:]]
        assert values == sorted(values, reverse=True)
    for c in result.capacities[1:]:
        unfused, untiled, tiled = (result.point(s, c).bytes for s in STRATEGIES)
        assert tiled <= untiled <= unfused
    assert result.point("unfused", 64).bytes == (8 + 4 + 4 + 8 + 8 + 8) * 4  # H written and read
    assert result.point("tiled", 64).bytes == (8 + 4 + 4 + 8) * 4
    assert "no plan fits" in result.table()
    assert result.table().splitlines()[0].endswith("SCIP optimal per point")
    # a point SCIP did not prove is marked, and the title no longer claims every point
    stopped = dataclasses.replace(result.point("tiled", 64).plan.report, status="timelimit", outcome=None)
    points = tuple(
        dataclasses.replace(p, plan=dataclasses.replace(p.plan, report=stopped))
        if (p.strategy, p.capacity) == ("tiled", 64)
        else p
        for p in result.points
    )
    table = dataclasses.replace(result, points=points).table()
    assert "SCIP optimal per point but the 1 marked with the status SCIP stopped at" in table.splitlines()[0]
    assert f"{(8 + 4 + 4 + 8) * 4} (timelimit)" in table


@pytest.mark.parametrize("tile", [16, 32, 64])
def test_the_gemm_frontier_is_at_or_below_a_hand_written_tiling(tile):
    # C in T x T tiles, k innermost over A's column and B's row of the tile:
    # on chip T*T + 2T floats; A read N/T times, B read M/T times, C written once.
    n = 4096
    program = polymap.parse(
        f"in A: f32[{n}, {n}]\nin B: f32[{n}, {n}]\nout C: f32[{n}, {n}]\nC[i, j] += A[i, k] * B[k, j]\n"
    )
    by_hand = 4 * (2 * n**3 // tile + n * n)
    result = frontier(program, [tile * tile + 2 * tile])
    assert result.point("tiled", tile * tile + 2 * tile).bytes <= by_hand


def test_capacity_ranges():
    assert [c.amount for c in capacity_list("1K..8K")] == [1024, 2048, 4096, 8192]
    assert [c.in_bytes for c in capacity_list("4KiB,16KiB")] == [True, True]
    with pytest.raises(ArgumentError, match="one unit"):
        capacity_list("8K..1K")
    # 300 is not 100 doubled: refused, not left out
    with pytest.raises(
        ArgumentError, match=r"the range doubles from 100 elements, so 300 elements is not in it"
    ):
        capacity_list("100..300")
    assert [c.amount for c in capacity_list("100..400")] == [100, 200, 400]
    with pytest.raises(ArgumentError, match="one unit"):
        frontier(polymap.parse(FFN), ["4K", "4KiB"])


def test_the_frontier_command_prints_a_table_and_draws_it(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    picture = tmp_path / "frontier.png"
    args = [
        "frontier",
        str(MODELS / "gpt3_attention_tiny.te"),
        "--capacities",
        "4K,8K",
        "--plot",
        str(picture),
        "-q",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "capacity (elements)" in out and "131072" in out
    assert picture.stat().st_size > 1000


# ------------------------------------------------------------------ the plan as a program


def _inputs(program, seed=0):
    rng = np.random.default_rng(seed)
    return {
        b.name: rng.standard_normal([int(str(n)) for n in b.shape]).astype(b.dtype.numpy)
        for b in program.inputs
    }


@pytest.mark.parametrize(
    ("source", "capacity"),
    [(FFN, 3), (FFN, 8), (FFN, 64), (ATTENTION, 10), (ATTENTION, 24), (FC, 6), (MATMUL_MIXED, 4)],
)
def test_the_planned_program_computes_the_same_outputs_bit_for_bit(source, capacity):
    program = polymap.parse(source).bind_defaults()
    planned = checked_planned_program(program, plan(program, capacity))  # isl's count = the plan's traffic
    arrays = _inputs(program)
    expected = polymap.reference(program, **arrays)
    got = polymap.reference(planned.program, **arrays)
    for name, value in expected.items():
        assert np.array_equal(got[name], value), name


@pytest.mark.parametrize(("model", "capacity"), [("gpt3_attention", "16K"), ("orojenesis_ffn", "512K")])
def test_isl_counts_the_traffic_a_full_size_plan_claims(model, capacity):
    program = polymap.load(MODELS / f"{model}.te")
    result = plan(program, capacity)
    planned = planned_program(program, result)
    claimed = {
        (c.einsum, c.tensor): (c.reads, c.writes) for c in result.accounting.tensors if c.reads or c.writes
    }
    assert counted_traffic(planned) == claimed
    assert sum(r * 4 + w * 4 for r, w in counted_traffic(planned).values()) == result.bytes  # f32 everywhere


def test_a_new_buffer_updated_without_a_start_is_refused():
    source = FFN.replace("H[m, f] = 0\n", "")
    # the analysis refuses it before the planner reads the chain
    with pytest.raises(
        UninitializedReadError, match=r"reads H\[m, f\] before .* give H\[m, f\] its start, 0, before"
    ):
        plan(polymap.parse(source), 64)


def test_the_fused_program_maps_compiles_and_runs_on_the_host(tmp_path, capsys):
    path = tmp_path / "fc.te"
    path.write_text(FC)
    assert main(["run", str(path), "--fuse", "6", "--fuse-if", "always", "--host", "-q"]) == 0
    out = capsys.readouterr().out
    assert "planned within 6 elements: mapping fc_planned" in out and "C: max abs error 0.0e+00" in out


@pytest.mark.parametrize("fuse", [True, "1K", "4KiB"])
def test_compile_with_fuse_plans_first_and_keeps_the_programs_inputs_and_outputs(fuse):
    program = polymap.parse(FFN.replace("param M = 4", "param M = 32").replace("param F = 2", "param F = 16"))
    program = program.bind_defaults()
    # reassociate=False: the mapping may spread a planned reduction over lanes, which
    # reorders its float sum; kept in order, the kernel equals the reference bit for bit
    kernel = polymap.compile(program, fuse=fuse, fuse_if="always", reassociate=False)
    # the planned program where the plan fuses H a band tile at a time (the FFN writes each
    # einsum in a nest of its own), the program as written where it does not
    result = plan(program, "48KiB" if fuse is True else fuse)
    fuses = any(len(group) > 1 and result.nests[group[0]].band for group in result.segments)
    assert kernel.mapping.program.name == (f"{program.name}_planned" if fuses else program.name)
    arrays = _inputs(program)
    assert np.array_equal(kernel.run_host(**arrays)["Y"], polymap.reference(program, **arrays)["Y"])


# a GEMM, its ReLU epilogue in place as a statement of its own, and a consumer: the plan
# writes H back after the GEMM and fuses the epilogue with the consumer, H a band tile there
EPILOGUE_APART = """
param M = 7, N = 5, K = 3
in  A: f32[M, K]
in  B: f32[K, N]
in  bias: f32[N]
in  W: f32[N, K]
new H: f32[M, N]
out Y: f32[M, K]
H[m, n] = 0
H[m, n] += A[m, k] * B[k, n]
H[m, n] = max(H[m, n] + bias[n], 0)
Y[m, k] += H[m, n] * W[n, k]
"""


def test_an_intermediate_the_gemm_writes_back_keeps_its_buffer_beside_the_fused_tiles():
    program = polymap.parse(EPILOGUE_APART, name="epi").bind_defaults()
    kernel = polymap.compile(program, fuse=30, fuse_if="always", reassociate=False)
    text = format_program(kernel.mapping.program)
    assert "new H: f32[7, 5]" in text and "H_band" in text  # written back, then read into the tile
    arrays = _inputs(program)
    assert np.array_equal(kernel.run_host(**arrays)["Y"], polymap.reference(program, **arrays)["Y"])


def test_a_plan_that_fuses_nothing_maps_the_program_as_written():
    # the plan's tiles of an unfused einsum bound its traffic; the mapper stages the nest
    # as written in tiles sized for the GPU
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    assert fused_program(program, "8K", links={"Q": "dram", "S": "dram"}) == program.bind_defaults()


def test_a_segment_the_program_writes_as_one_nest_stays_as_written():
    program = polymap.load(MODELS / "fc_bias_relu.te").bind(M=16, K=8, N=32)
    result = plan(program, 256)
    assert result.segments == ((0, 1),)  # C fused a tile at a time: the GEMM, its bias and ReLU
    assert fused_program(program, 256) == program.bind_defaults()


def test_a_fused_segment_whose_band_is_one_tile_stays_as_written():
    # Q whole on chip, one band tile: on a GPU the program's own buffer Q is that tile
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    links = {"Q": "tiled", "S": "dram"}
    result = plan(program, "8K", links=links)
    assert result.segments == ((0, 1), (2,)) and not result.nests[0].band
    assert fused_program(program, "8K", links=links) == program.bind_defaults()


def test_a_fused_segment_is_written_as_its_einsums_over_the_band_tile():
    # only S is a tile; Q, K, V and O are read and written in their own buffers, each
    # einsum's output points one loop over the band tile, its reduction in order
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    links = {"Q": "dram", "S": "tiled"}
    result = plan(program, "1K", links=links)
    assert result.segments == ((0,), (1, 2)) and [(b.dim, b.factor) for b in result.nests[1].band] == [
        ("s", 2)
    ]
    mapped = fused_program(program, "1K", links=links)
    segment = """par 2 s_band {
  new S_band: f32[16, 32]
  par 512 p {
    S_band[p // 32, p % 32] = 0
    seq 128 d2 {
      S_band[p // 32, p % 32] += Q[s_band * 16 + p // 32, d2] * K[p % 32, d2]
    }
  }
  par 2048 p2 {
    seq 32 t2 {
      O[s_band * 16 + p2 // 128, p2 % 128] += S_band[p2 // 128, t2] * V[t2, p2 % 128]
    }
  }
}"""
    assert format_program(mapped).rstrip().endswith(segment)
    # S lives in its band tiles only: no global buffer is declared (or allocated) for it;
    # Q, written back, keeps its own
    assert {d.name for d in mapped.buffers} == {"X", "Wq", "Q", "K", "V", "O"}
    arrays = _inputs(program.bind_defaults())
    np.testing.assert_array_equal(
        polymap.reference(mapped, **arrays)["O"], polymap.reference(program, **arrays)["O"]
    )


def test_only_the_fused_segment_is_rewritten_the_rest_stays_as_written():
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    links = {"Q": "tiled", "S": "dram"}
    result = plan(program, "2K", links=links)
    assert result.segments == ((0, 1), (2,)) and [loop.dim for loop in result.nests[0].band] == ["s"]
    mapped = fused_program(program, "2K", links=links)
    written = program.bind_defaults()
    assert mapped.name == f"{program.name}_planned"
    text = format_program(mapped)
    assert "new Q_band" in text  # Q_proj and QK: one band, Q's tile on chip
    # O's einsum as written: no tiles of its own, the last nest
    assert "O_tile" not in text and "V_tile" not in text
    assert text.rstrip().endswith("seq 32 t {\n      O[s, d] += S[s, t] * V[t, d]\n    }\n  }\n}")
    arrays = _inputs(program.bind_defaults())
    got = polymap.reference(mapped, **arrays)["O"]
    np.testing.assert_array_equal(got, polymap.reference(written, **arrays)["O"])


def test_fuse_maps_the_fused_program_only_where_it_is_predicted_faster(capsys):
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    links = {"Q": "tiled", "S": "dram"}
    fused = polymap.optimize(fused_program(program, "2K", links=links))
    written = polymap.optimize(program)
    times = [sum(c.time_s for c in m.costs) for m in (fused, written)]
    choice = choose_fusion(program, "2K", links=links)
    assert choice.planned is not None and choice.predicted_s is not None
    assert choice.predicted_s == pytest.approx(times)
    assert sum(c.time_s for c in choice.mapping.costs) == pytest.approx(min(times))
    assert choice.program.name == (
        "gpt3_attention_tiny_planned" if times[0] < times[1] else "gpt3_attention_tiny"
    )
    # the command line says what it compared and maps what the choice maps
    at_1k = choose_fusion(program, "1K")
    assert main(["map", str(MODELS / "gpt3_attention_tiny.te"), "--fuse", "1K", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"mapping of program {at_1k.program.name} ")
    assert out.splitlines()[2] == f"  {at_1k.note()}"  # the report's third line
    # ... and its JSON, and the mapping polymap.optimize returns with fuse
    assert main(["map", str(MODELS / "gpt3_attention_tiny.te"), "--fuse", "1K", "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["fusion"]
    assert data["fused"] is False and data["planned_program"] == "gpt3_attention_tiny_planned"
    assert (data["predicted_fused_s"], data["predicted_as_written_s"]) == pytest.approx(at_1k.predicted_s)
    assert polymap.optimize(program, fuse="1K").fusion == at_1k.summary()
    assert polymap.optimize(program).fusion is None
    # the line docs/fusion.md shows is the one printed
    assert at_1k.note() in (MODELS.parent / "docs" / "fusion.md").read_text()


def test_fuse_if_always_maps_the_fused_program_and_other_values_are_refused():
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    always = choose_fusion(program, "2K", fuse_if="always", links={"Q": "tiled", "S": "dram"})
    assert always.program.name == "gpt3_attention_tiny_planned" and always.predicted_s is None
    at_1k = choose_fusion(program, "1K", fuse_if="always")
    assert polymap.optimize(program, fuse="1K", fuse_if="always").program.name == at_1k.program.name
    with pytest.raises(
        ArgumentError, match="fuse_if is one of 'faster', 'always', 'fastest', not 'sometimes'"
    ):
        polymap.optimize(program, fuse="2K", fuse_if="sometimes")
    # without fuse it would change nothing: refused, not ignored
    with pytest.raises(ArgumentError, match="fuse_if='always' chooses between .*; pass fuse too"):
        polymap.compile(program, fuse_if="always")


ELEMENTWISE_PAIR = """param M = 256
param N = 128
in  A: f32[M, N]
in  B: f32[M, N]
in  C: f32[M, N]
new T: f32[M, N]
out Y: f32[M, N]
T[i, j] = A[i, j] * B[i, j]
Y[i, j] = T[i, j] + C[i, j]
"""


def test_fuse_if_fastest_maps_the_fastest_of_every_way_of_linking(tmp_path, capsys):
    """The oracle: the program as written, the plan with the link free, and the plan with T
    pinned each way, each mapped on its own (``fuse_if="always"``); "fastest" maps the one
    of least predicted time, and says what it compared."""
    program = polymap.parse(ELEMENTWISE_PAIR, name="pair")

    def predicted(mapping) -> float:
        return sum(c.time_s for c in mapping.costs)

    times = {"as written": predicted(polymap.optimize(program))}
    times["free"] = predicted(polymap.optimize(program, fuse="128", fuse_if="always"))
    for mode in ("dram", "tiled", "whole"):
        try:
            mapping = polymap.optimize(program, fuse="128", fuse_if="always", links={"T": mode})
        except CapacityError:
            continue
        times[mode] = predicted(mapping)
    assert "whole" not in times  # a whole 256 x 128 T does not fit in 128 elements
    fastest = polymap.optimize(program, fuse="128", fuse_if="fastest")
    assert predicted(fastest) == pytest.approx(min(times.values()))
    assert predicted(fastest) <= predicted(polymap.optimize(program, fuse="128"))  # fuse_if="faster"
    note = fastest.fusion.note
    assert "as written" in note and "T=tiled" in note and "T=whole (it does not fit in 128 elements)" in note
    assert note.endswith(f"mapping {fastest.program.name}")
    path = tmp_path / "pair.te"
    path.write_text(ELEMENTWISE_PAIR)
    assert main(["map", str(path), "--fuse", "128", "--fuse-if", "fastest", "-q"]) == 0
    assert f"  {note}" in capsys.readouterr().out.splitlines()
    assert main(["map", str(path), "--fuse", "128", "--fuse-if", "fastest", "-q", "--json"]) == 0
    tried = json.loads(capsys.readouterr().out)["fusion"]["tried"]
    mapped = sorted(t["predicted_s"] for t in tried if t["left_out"] is None)
    assert mapped == pytest.approx(sorted({times["as written"], times["free"]}))  # T=tiled: the free plan
    assert [t["links"] for t in tried if t["left_out"]] == [["T=whole"]]
    taken = [t for t in tried if t["taken"]]
    assert len(taken) == 1 and taken[0]["predicted_s"] == pytest.approx(min(times.values()))
    assert [t["links"] for t in tried if t["as_written"]] == [["T=dram"]]  # T written back: as written


def test_fuse_if_without_fuse_is_refused_on_the_command_line(capsys):
    assert main(["map", str(MODELS / "gpt3_attention_tiny.te"), "--fuse-if", "always", "-q"]) != 0
    assert "--fuse-if always chooses between a fused program and the program as written; give --fuse too" in (
        capsys.readouterr().err
    )


def test_links_reach_the_plan_from_the_api_and_the_command_line(capsys):
    """``links`` / ``--link`` pin the plan's intermediates where ``fuse`` plans: Q tiled and S
    written back at 2K is a fused program (it rewrites Q's segment), without them the plan at
    2K rewrites nothing."""
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    links = {"Q": "tiled", "S": "dram"}
    pinned = polymap.optimize(program, fuse="2K", links=links, fuse_if="always")
    assert pinned.fusion.planned == "gpt3_attention_tiny_planned" and pinned.fusion.fused
    assert polymap.optimize(program, fuse="2K", fuse_if="always").fusion.planned is None
    tiny = str(MODELS / "gpt3_attention_tiny.te")
    assert main(["map", tiny, "--fuse", "2K", "--link", "Q=tiled", "--link", "S=dram", "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)["fusion"]
    assert data["planned_program"] == "gpt3_attention_tiny_planned"
    # the links and the plan's sizes are recorded with the choice, and the note names them
    assert data["links"] == links and data["plan_sizes"] == {"SEQ": 32, "DIM": 128}
    assert data["note"].startswith("planned within 2048 elements with Q=tiled, S=dram: ")
    # a fused program's report gives the plan's sizes (they are numbers in it)
    assert "cost estimated at SEQ = 32, DIM = 128 (the plan's sizes" in pinned.report()
    # without fuse they would change nothing: refused, not ignored
    with pytest.raises(ArgumentError, match="links pin intermediates of the plan fuse makes; pass fuse too"):
        polymap.compile(program, links=links)
    assert main(["emit", tiny, "--link", "Q=tiled", "-q"]) != 0
    assert "--link pins an intermediate of the plan; give --fuse too" in capsys.readouterr().err
    assert main(["map", tiny, "--fuse", "2K", "--link", "Q=tiled", "--link", "Q=dram", "-q"]) != 0
    assert "--link Q given more than once" in capsys.readouterr().err


def test_min_band_tiles_reaches_the_plan_from_the_api_and_the_command_line(capsys):
    """``min_band_tiles`` / ``--min-band-tiles`` with ``fuse``: the tiny chain at 1K fuses S a
    tile at a time in a band of 2 tiles; asked for 4, the plan has no such segment, and the
    program maps as written. The floor is recorded with the choice and named by its note."""
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    assert "par 2 s_band {" in format_program(choose_fusion(program, "1K", fuse_if="always").program)
    floored = choose_fusion(program, "1K", fuse_if="always", min_band_tiles=4)
    assert floored.planned is None and floored.program is program
    assert floored.note().startswith("planned within 1024 elements, bands of at least 4 tiles: no segment")
    assert polymap.optimize(program, fuse="1K", min_band_tiles=4).fusion.min_band_tiles == 4
    tiny = str(MODELS / "gpt3_attention_tiny.te")
    assert main(["map", tiny, "--fuse", "1K", "--min-band-tiles", "4", "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)["fusion"]
    assert data["min_band_tiles"] == 4 and data["planned_program"] is None
    # without fuse it would change nothing: refused, not ignored
    with pytest.raises(
        ArgumentError, match="min_band_tiles shapes the bands of the plan fuse makes; pass fuse too"
    ):
        polymap.optimize(program, min_band_tiles=4)
    assert main(["map", tiny, "--min-band-tiles", "4", "-q"]) != 0
    assert "--min-band-tiles shapes the plan's fused bands; give --fuse too" in capsys.readouterr().err
    with pytest.raises(ArgumentError, match="min_band_tiles must be a whole number >= 1"):
        polymap.optimize(program, fuse="1K", min_band_tiles=0)
    with pytest.raises(SystemExit):  # argparse's own error
        main(["map", tiny, "--fuse", "1K", "--min-band-tiles", "0", "-q"])
    assert "expected a positive integer, got '0'" in capsys.readouterr().err


def test_the_fusion_note_reaches_the_header_and_bad_options_are_named():
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    kernel = polymap.compile(program, fuse="1K", fuse_if="always")
    note = kernel.mapping.fusion.note
    assert f"// {note}" in kernel.source and f"// {note}" in kernel.header()
    # (from a review) a keyword compile does not take is refused as compile's, before any solve
    with pytest.raises(TypeError, match="compile\\(\\) got an unexpected keyword argument 'bogus'"):
        polymap.compile(program, fuse="1K", bogus=1)


def test_fuse_that_rewrites_nothing_keeps_the_sizes_free():
    # found by trying it as a user: the program as written, not bound to its defaults, so
    # its kernels still take the sizes as arguments
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    kernel = polymap.compile(program, fuse="16K")
    assert {"SEQ", "DIM"} <= {a.c_name for a in kernel.cuda.arguments}
    assert kernel.mapping.program.params == program.params


def test_pins_of_the_program_as_written_skip_the_comparison_and_say_so():
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    choice = choose_fusion(program, "1K", pins={"t": {"threads": 32}})
    assert choice.program is program and choice.predicted_s is None
    assert choice.not_compared == "pins given"
    assert "was not mapped" in choice.note() and "mapping gpt3_attention_tiny as written" in choice.note()
    assert polymap.optimize(program, fuse="1K", pins={"t": {"threads": 32}}).program.name == program.name
    # (from a review) a pin whose loop the fused program has too is not applied to it:
    # the fused program is not compared at all (d is a loop of both)
    both = choose_fusion(program, "1K", pins={"d": {"threads": 128}})
    assert both.program is program and both.predicted_s is None and both.not_compared == "pins given"
    with_context = choose_fusion(program, "1K", context="SEQ >= 32")
    assert with_context.not_compared == "a context given"


def test_run_with_fuse_checks_the_kernels_against_the_program_in_the_file(monkeypatch, capsys):
    import sys

    reference_module = sys.modules["polymap.reference"]  # the module (polymap.reference is its function)
    seen = []
    real = reference_module.reference

    def spy(program, **arrays):
        seen.append(program.name)
        return real(program, **arrays)

    monkeypatch.setattr(reference_module, "reference", spy)
    tiny = str(MODELS / "gpt3_attention_tiny.te")
    assert main(["run", tiny, "--fuse", "1K", "--fuse-if", "always", "--host", "--no-reassociate", "-q"]) == 0
    out = capsys.readouterr().out
    assert "mapping gpt3_attention_tiny_planned" in out and "O: max abs error 0.0e+00" in out
    assert out.count("planned within 1024 elements") == 1  # in the report, not printed before it too
    assert seen == ["gpt3_attention_tiny"]


def test_fuse_needs_a_program_not_a_path():
    with pytest.raises(ArgumentError):
        polymap.compile(str(MODELS / "gpt3_attention_tiny.te"), fuse="1K")
    with pytest.raises(ArgumentError, match="fuse_if is one of"):
        polymap.optimize(polymap.load(MODELS / "gpt3_attention_tiny.te"), fuse="1K", fuse_if="")


def test_a_plan_scip_did_not_prove_optimal_is_named_in_the_note_and_the_json(monkeypatch):
    import polymap.plan.planner as planner_module

    real = planner_module.plan

    def stopped(program, capacity, **options):  # SCIP at its time limit with a gap of 18%
        result = real(program, capacity, **options)
        return dataclasses.replace(
            result, report=dataclasses.replace(result.report, status="timelimit", gap=0.18, outcome=None)
        )

    monkeypatch.setattr(planner_module, "plan", stopped)
    program = polymap.parse(FFN, name="ffn")
    choice = choose_fusion(program, 8, fuse_if="always")
    assert (
        "not proved optimal within the time limit (raise --time-limit, time_limit=): the plan (SCIP timelimit in"
        in choice.note()
    )
    assert choice.summary().to_json()["plans_not_proved_optimal"][0].endswith("gap 18.0%)")
    fastest = choose_fusion(program, 8, fuse_if="fastest").summary().to_json()["plans_not_proved_optimal"]
    assert [u.split(" (")[0] for u in fastest] == [
        "the plan",
        "the plan with H=dram",
        "the plan with H=tiled",
    ]
    monkeypatch.setattr(planner_module, "plan", real)
    assert choose_fusion(program, 8, fuse_if="always").summary().unproved == ()


def test_fuse_gives_the_planner_the_time_limit_and_checks_a_plot_path_first(monkeypatch, capsys, tmp_path):
    import polymap.fused as fused_module
    import polymap.plan.planner as planner_module

    limits = []
    real = planner_module.plan

    def spy(program, capacity, **options):
        limits.append(options.get("time_limit_s"))
        return real(program, capacity, **options)

    monkeypatch.setattr(planner_module, "plan", spy)
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    choice = choose_fusion(program, " 1K", time_limit=7.5)
    assert limits == [7.5] and choice.note().startswith("planned within 1024 elements: ")

    def never(*args, **kwargs):
        raise AssertionError("planned before the plot path was checked")

    monkeypatch.setattr(fused_module, "choose_fusion", never)
    bad = tmp_path / "missing" / "x.png"
    assert (
        main(["map", str(MODELS / "gpt3_attention_tiny.te"), "--fuse", "1K", "--plot", str(bad), "-q"]) != 0
    )
    assert str(bad.parent) in capsys.readouterr().err


def test_fuse_with_a_given_mapping_is_refused():
    program = polymap.parse(FC)
    mapping = polymap.optimize(program, fuse="8", fuse_if="always")  # C fused a tile at a time
    assert mapping.program.name.endswith("_planned")
    with pytest.raises(ArgumentError, match="fuse plans the program before a mapping is chosen"):
        polymap.compile(program, mapping, fuse=True)
    arrays = _inputs(program)  # the mapping with its own program compiles, equal to the reference
    got = polymap.compile(mapping.program, mapping).run_host(**arrays)["C"]
    assert np.array_equal(got, polymap.reference(program, **arrays)["C"])


def test_the_plan_command_prints_the_program(capsys):
    assert main(["plan", str(MODELS / "fc_bias_relu.te"), "--capacity", "64KiB", "--program", "-q"]) == 0
    out = capsys.readouterr().out
    assert "isl counts" in out and "new C_band: f32[" in out and re.search(r"par \d+ i_band \{", out)


def test_an_inout_accumulation_starts_from_dram_and_is_no_link():
    # found by a random check against the oracle: C's old value must be read off chip, so
    # keeping C on chip between the two einsums would have skipped that read
    program = polymap.parse("in A: f32[4]\ninout C: f32[4]\nC[i] += A[i]\nC[i] = C[i] + 1\n")
    chain = read_chain(program)
    assert chain.links == (None,)
    result = plan(program, 8)
    assert (
        result.bytes == best_bytes(chain, 8) == (4 + 4 + 4 + 4 + 4) * 4
    )  # A, C read, C written, read, written
    planned = checked_planned_program(program, result)
    arrays = _inputs(program)
    assert np.array_equal(
        polymap.reference(planned.program, **arrays)["C"], polymap.reference(program, **arrays)["C"]
    )


# ------------------------------------------------------------------ found by trying it as a user


def test_an_update_of_a_result_an_earlier_einsum_wrote_is_refused_not_costed_as_free():
    source = (
        "in A: f32[8, 4]\nin B: f32[4, 8]\nout C: f32[8, 8]\nC[i, j] += A[i, k] * B[k, j]\nC[i, j] *= 2.0\n"
    )
    with pytest.raises(PlanError, match=r"`C\[i, j\] \*= 2.0` updates C, which an earlier statement writes"):
        plan(polymap.parse(source), 64)
    # written as an element-wise einsum it is a link, as the bias and ReLU are
    fixed = source.replace("C[i, j] *= 2.0", "C[i, j] = C[i, j] * 2.0")
    assert [link.buffer for link in read_chain(polymap.parse(fixed)).links] == ["C"]


def test_a_constant_start_is_part_of_its_accumulation():
    source = "in A: f32[8, 4]\nout r: f32[8]\nr[i] = -inf\nr[i] max= A[i, k]\n"
    (einsum,) = read_chain(polymap.parse(source)).einsums
    assert einsum.statements == ("S0", "S1")
    assert plan(polymap.parse(source), 64).bytes == (32 + 8) * 4


def test_a_consumer_reading_part_of_the_intermediate_is_no_link():
    # H has 64 elements, the consumer's loop reads 32 of them: a band over i would not line up
    source = "in x: f32[64]\nnew H: f32[64]\nout y: f32[32]\nH[i] = x[i] * 2\npar 32 i { y[i] = H[i] + 1 }\n"
    assert read_chain(polymap.parse(source)).links == (None,)


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("param N = 64\nin x: f32[N]\nout y: f32[N]\npar N + 1 i { y[i] = x[i] }\n", polymap.BoundsError),
        ("param N = 64\nin x: f32[N]\nout s: f32\npar N i { s += x[i] }\n", polymap.RaceError),
    ],
)
def test_an_invalid_program_is_refused_as_check_refuses_it(source, error):
    with pytest.raises(error):
        plan(polymap.parse(source), 64)


def test_polymap_plan_and_frontier_are_the_planners_functions():
    program = polymap.parse(FFN)
    called, direct = polymap.plan(program, 64), plan(program, 64)  # the package called: its planner
    assert (called.bytes, called.nests, called.link_modes()) == (
        direct.bytes,
        direct.nests,
        direct.link_modes(),
    )
    assert polymap.plan(program, 64, links={"H": "dram"}).link_modes() == {"H": LinkMode.DRAM}
    assert polymap.frontier(program, [6, 64]).table() == frontier(program, [6, 64]).table()


def test_bad_arguments_are_argument_errors():
    program = polymap.parse(FFN)
    for limit in (-1, 0, float("nan"), float("inf"), True):
        with pytest.raises(ArgumentError, match="time limit"):
            plan(program, 64, time_limit_s=limit)
    with pytest.raises(ArgumentError, match="no buffer of that name"):
        plan(program, 64, links={"Nope": "dram"})
    with pytest.raises(ArgumentError, match="links must be a dict"):
        plan(program, 64, links="H=dram")
    with pytest.raises(ArgumentError):
        plan("not a program", 64)
    for text in ("16iB", "\u0663"):
        with pytest.raises(ArgumentError, match="capacity"):
            Capacity.parse(text)


def test_more_iterations_than_the_planner_counts_are_named():
    source = "param N = 1099511627776\nin A: f32[N, N]\nin B: f32[N, N]\nout C: f32[N, N]\nC[i, j] += A[i, k] * B[k, j]\n"
    with pytest.raises(PlanError, match="at most 2\\^64 per einsum"):
        plan(polymap.parse(source), 4096)


def test_two_reads_of_one_buffer_are_told_apart_in_the_report():
    source = "in A: f32[4, 4]\nout C: f32[4, 4]\nC[i, j] += A[i, k] * A[k, j]\n"
    labels = [c.label for c in plan(polymap.parse(source), 64).accounting.tensors]
    assert labels == ["A[i, k]", "A[k, j]", "C[i, j] (out)"]


# ------------------------------------------------------------------ random chains


def _oracle_work(chain) -> int:
    """About how many nests the oracle walks for ``chain`` (to keep the fast cases fast)."""
    from plan_oracle import splits

    total = 0
    for e in chain.einsums:
        n = len(e.tensors)
        total += (
            math.factorial(n) * math.prod(len(list(splits(d.size, n + 1))) for d in e.dims) * e.iterations
        )
    holdable = sum(1 for e in chain.einsums for t in e.tensors if not t.is_output)
    return total * 2**holdable * 3 ** sum(link is not None for link in chain.links)


def _random_cases(seed: int, count: int, work: int):
    import random

    from plan_fuzzgen import random_program

    rng = random.Random(seed)
    found = 0
    while found < count:
        program = polymap.parse(random_program(rng))
        chain = read_chain(program)
        if _oracle_work(chain) <= work:
            least = max(len(e.tensors) for e in chain.einsums)
            yield program, chain, sorted({least, least + 3, rng.randint(3, 40)})
            found += 1


def _check_random(program, chain, capacities):
    for capacity in capacities:
        expected = best_bytes(chain, capacity)
        if expected is None:
            with pytest.raises(PlanError):
                plan(program, capacity)
            continue
        result = plan(program, capacity)
        assert result.report.optimal and result.bytes == expected, (str(program), capacity)
        assert max(result.accounting.footprints) <= capacity


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_chains_against_the_oracle(seed):
    for program, chain, capacities in _random_cases(seed, 2, work=200_000):
        _check_random(program, chain, capacities)


@pytest.mark.fuzz
def test_random_chains_against_the_oracle_long():
    """POLYMAP_FUZZ_SEED and POLYMAP_FUZZ_BUDGET (seconds) as the pipeline's fuzz campaign."""
    import os
    import time

    seed = int(os.environ.get("POLYMAP_FUZZ_SEED", "100"))
    budget = float(os.environ.get("POLYMAP_FUZZ_BUDGET", "300"))
    start = time.monotonic()
    for program, chain, capacities in _random_cases(seed, 10**9, work=5_000_000):
        _check_random(program, chain, capacities)
        if time.monotonic() - start > budget:
            break


def test_the_best_plan_without_tiled_links_is_scips_first_solution():
    """The planner solves the chain without tiled links first and gives that plan to the
    whole search as its first solution; the report's SCIP time holds both solves and says
    how much the first took. Where tiling is not allowed, or a link is pinned tiled, there
    is no first solve. The whole search's optimum is never worse than the first solution,
    and here (the tiny attention chain at 4096 elements) SCIP keeps S whole."""
    program = polymap.load(MODELS / "gpt3_attention_tiny.te")
    free = plan(program, 4096)
    assert 0 < free.first_solution_s < free.report.solve_time_s and free.report.optimal
    assert (
        f"({free.first_solution_s:.2f} s of it for a first solution: the best plan without tiled links)"
        in str(free)
    )
    assert free.to_json()["scip"]["first_solution_s"] == free.first_solution_s
    from polymap.plan.bench import PlanCase, PlanRun, markdown

    untiled = plan(program, 4096, strategy="untiled")
    assert untiled.first_solution_s == 0 and "for a first solution" not in str(untiled)
    case = PlanCase("tiny", "gpt3_attention_tiny.te", (), 4096)
    record = markdown([PlanRun(case, free, untiled, 1.0)], command="c", machine="m")
    assert f"| {free.report.solve_time_s:.2f} | {free.first_solution_s:.2f} | 1.00 | {free.bytes} |" in record
    assert free.bytes <= untiled.bytes
    pinned = plan(program, 16384, links={"S": "tiled"})
    assert pinned.first_solution_s == 0 and pinned.link_modes()["S"] is LinkMode.TILED


def test_an_infeasible_first_solution_leaves_the_optimum_as_it_is():
    """SCIP checks a solution given before the solve and drops an infeasible one: a start of
    all zeros (no loop order is a permutation) leaves the plan SCIP proves optimal unchanged."""
    from polymap.plan.formulation import build

    chain = read_chain(polymap.load(MODELS / "gpt3_attention_tiny.te"))
    cold = build(chain, 4096, bytes_unit=False)
    cold.scip.optimize()
    wrong = build(chain, 4096, bytes_unit=False)
    wrong.start_from({var.name: 0.0 for var in wrong.scip.getVars()})
    wrong.scip.optimize()
    assert wrong.scip.getStatus() == cold.scip.getStatus() == "optimal"
    assert wrong.scip.getObjVal() == pytest.approx(cold.scip.getObjVal(), rel=1e-9)


THREE_GEMMS = """param M = 16
param K = 4
in  A: f32[M, K]
in  B: f32[K, K]
in  C: f32[K, K]
in  D: f32[K, K]
new T: f32[M, K]
new U: f32[M, K]
out Y: f32[M, K]
T[m, n] = 0
T[m, n] += A[m, k] * B[k, n]
U[m, p] = 0
U[m, p] += T[m, n] * C[n, p]
Y[m, q] += U[m, p] * D[p, q]
"""


def test_a_plan_scip_presolve_calls_infeasible_is_found_without_presolve():
    """(from a review) Every link written back, 64 elements: SCIP's presolve called the
    model infeasible, though plans fit in 63 elements; the planner confirms an infeasibility
    without presolve, and finds the plan. More capacity never costs bytes."""
    program = polymap.parse(THREE_GEMMS, name="three")
    pins = {"T": "dram", "U": "dram"}
    at = {c: plan(program, c, links=pins) for c in (63, 64, 65)}
    assert all(p.report.outcome.solved for p in at.values())
    assert at[65].bytes <= at[64].bytes <= at[63].bytes
    with pytest.raises(CapacityError, match="fits in 64 elements with the pins T=whole"):
        plan(program, 64, links={"T": "whole", "U": "whole"})
