"""The pipeline (``polymap/pipeline.py``): each (program, context) analyzed once, and the
steps meeting through the objects they pass along."""

from __future__ import annotations

import ast
import functools
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

import polymap
import polymap.poly.model as poly_model
from polymap import ArgumentError, Axis, Mapping, Program, analyze, optimize
from polymap.cli import main
from polymap.codegen.cuda import emit_cuda
from polymap.ir.parse import load, parse
from polymap.mapping.outcome import Outcome
from polymap.mapping.proof import Obligation
from polymap.mapping.solve import KernelProblem
from polymap.mapping.space import kernels, parse_pins
from polymap.targets import H100

ROOT = Path(__file__).resolve().parent.parent
GPT3 = ROOT / "models" / "gpt3_attention_tiny.te"


def _count_analyses(monkeypatch) -> Counter:
    """Every polyhedral analysis, by (program, context): the function all entry points
    (``analyze``, the pipeline's memo, register promotion) end in."""
    calls: Counter = Counter()
    real = poly_model._analyze

    def counting(program, context):
        calls[program, context] += 1
        return real(program, context)

    monkeypatch.setattr(poly_model, "_analyze", counting)
    return calls


def test_compile_analyzes_each_program_once(monkeypatch):
    program = load(GPT3)
    calls = _count_analyses(monkeypatch)
    kernel = polymap.compile(program)
    assert sum(calls.values()) == len(calls), {p.name: n for (p, _), n in calls.items() if n > 1}
    # the program as written, with accumulators in registers loading their elements (whose
    # dataflow finds the out buffers' registers that start at 0), the program with those
    # zero starts (proved, emitted), and the latter with the cost sizes bound (SCIP and the
    # cost model)
    mapped = kernel.mapping.program
    bound = mapped.bind(**dict(kernel.mapping.cost_sizes))
    loading = [p for p, _ in calls if p not in (program, mapped, bound)]
    assert set(calls) == {(program, None), (mapped, None), (bound, None), (loading[0], None)}
    assert "O_acc = O[" in str(loading[0]) and "O_acc = 0" in str(mapped)
    assert mapped != program  # three reductions promoted: the rewrite is one of the three


def test_the_emit_command_analyzes_each_program_once(monkeypatch, tmp_path):
    calls = _count_analyses(monkeypatch)
    assert main(["emit", str(ROOT / "models" / "gemv.te"), "-o", str(tmp_path / "gemv.cu")]) == 0
    # the command's own check of the file (binding defaults where flat indices need them) is
    # the one repeat: then one pipeline run, not an optimize and a compile that proves it again
    assert [n for n in calls.values() if n > 1] == [2] and sum(calls.values()) == len(calls) + 1


# ------------------------------------------------------------------ the import graph

PACKAGE = ROOT / "polymap"

# What each part of polymap may import from the others (errors and version: from anywhere).
# The folder tree reads as the pipeline: arrows point from a stage to the stages before it.
ALLOWED = {
    "ir": set(),
    "poly": {"ir"},
    "transform": {"ir", "poly"},
    "targets": set(),
    "reference": {"ir", "poly"},
    "mapping": {"ir", "transform", "poly", "targets"},
    "schedule": {"ir", "poly", "targets", "mapping"},
    "prove": {"ir", "transform", "poly", "targets", "mapping", "schedule", "prove_lanes", "prove_split"},
    "prove_lanes": {"ir", "poly", "targets", "mapping", "schedule"},  # the lanes' obligations
    "prove_split": {"ir", "poly", "transform"},  # a split reduction's rewrite
    "codegen": {"ir", "poly", "targets", "schedule"},
    "runtime": {"ir", "poly", "codegen", "reference", "targets"},
    "split_choice": {"ir", "transform", "targets", "mapping", "prove_split"},  # a step of the pipeline
    "scan_choice": {"ir", "transform", "mapping", "split_choice"},  # a step of the pipeline
    "pipeline": {
        "ir",
        "transform",
        "poly",
        "targets",
        "mapping",
        "schedule",
        "prove",
        "prove_split",
        "split_choice",
        "scan_choice",
        "codegen",
    },
    "machine_code": {"targets", "runtime", "codegen"},  # codegen: the lines of full blocks
    "kernel": {"ir", "targets", "mapping", "codegen", "pipeline", "runtime", "machine_code"},
    "plan": {
        "ir",
        "poly",
        "mapping",
    },  # poly: isl counts a planned program; mapping: SCIP's solve and outcome
}
BASE = {"errors", "version", "progress", "arrays", "compare"}  # leaves: they import no other polymap module
# Known edges against the rules, each with its reason; the test fails on any other, and on
# an entry here that the code no longer has (so that the list only shrinks).
EXCEPTIONS = {
    # the public name stays in mapping.solve for its importers; it calls up into the steps
    ("polymap.mapping.solve", "polymap.pipeline"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every polymap module an ``import`` statement of the file names, at any depth (a
    function-level import is an edge too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {name for name in found if name == "polymap" or name.startswith("polymap.")}


def _part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_import_graph_points_down_the_pipeline():
    edges = {(_module_name(f), target) for f in PACKAGE.rglob("*.py") for target in _imports(f)}
    wrong = set()
    for source, target in edges:
        src, dst = _part(source), _part(target)
        if src not in ALLOWED or dst == src or dst in BASE:
            continue  # the top (polymap, cli, bench) may import anything
        if dst not in ALLOWED[src] and (source, target) not in EXCEPTIONS:
            wrong.add((source, target))
    assert not wrong, sorted(wrong)
    assert EXCEPTIONS <= edges, sorted(EXCEPTIONS - edges)
    assert ("polymap.transform.registers", "polymap.poly.model") in edges  # the check sees real edges
    assert not {(s, t) for s, t in edges if _part(s) in BASE and _part(t) != _part(s)}  # leaves


def test_transforms_live_in_transform():
    assert not (PACKAGE / "ir" / "registers.py").exists() and not (PACKAGE / "ir" / "fold.py").exists()
    assert {p.name for p in (PACKAGE / "transform").glob("*.py")} >= {"registers.py", "fold.py"}


# ------------------------------------------------------------ a mapping carries its proof

TRANSPOSE = """
param N
in A: f32[N, N]
out B: f32[N, N]
par N i { par N j { B[j, i] = A[i, j] } }
"""


@functools.cache
def _transpose() -> tuple[Program, Mapping]:
    program = parse(TRANSPOSE, name="tp").bind(N=256)
    return program, optimize(program)


def _by_hand(mapping: Mapping) -> Mapping:
    """The optimized mapping with the loops' threads and axes changed by hand: j on x with 4
    threads (lanes 256 elements apart in B), i on y with 32, nothing staged."""
    km = mapping.kernels[0]
    i, j = km.loops
    loops = (
        replace(i, thread_axis=Axis.Y, block_axis=Axis.Y, threads=32, seq=1),
        replace(j, thread_axis=Axis.X, block_axis=Axis.X, threads=4, seq=1),
    )
    return replace(mapping, kernels=(replace(km, loops=loops, staging=None),))


def test_a_hand_made_mapping_is_proved_and_costed_as_itself():
    program, optimized = _transpose()
    hand = _by_hand(optimized)
    kernel = polymap.compile(program, hand)
    mapping = kernel.mapping
    assert mapping.kernels == hand.kernels and mapping.given
    assert mapping.proved and mapping.proof.mappings == hand.kernels
    # the proof is of this launch: block (4, 32, 1), no staging obligations
    proof = mapping.proof.kernel("kernel0")
    assert proof.launch.startswith("grid (64, 8, 1) x block (4x32x1)")
    assert not proof.of(Obligation.STAGING_COVERAGE) and not proof.of(Obligation.BARRIERS)
    assert {p.subject for p in proof.of(Obligation.EXACTLY_ONCE)} == {"S0"}
    # the cost of these decisions: j on x has 4 threads, so a warp is 4 lanes x 8 rows of
    # i: in A rows of 16 bytes, 1 KiB apart (8 sectors per request); in B 4 columns of 8
    # adjacent floats (4 sectors); 65536 instances each, no shared memory
    cost = mapping.costs[0]
    assert (cost.threads_per_block, cost.blocks, cost.shared_bytes) == (128, 512, 0)
    rows = {(a.access, a.is_write): a for a in cost.accesses}
    assert set(rows) == {("A[i, j]", False), ("B[j, i]", True)}
    assert (rows["A[i, j]", False].lane_stride, rows["A[i, j]", False].sectors_per_request) == (1, 8)
    assert (rows["B[j, i]", True].lane_stride, rows["B[j, i]", True].sectors_per_request) == (256, 4)
    assert rows["B[j, i]", True].bytes == 4 * 32 * 65536 // 32
    # and it is the cost model's value, not the optimized mapping's
    model = analyze(program)
    problem = KernelProblem.build(kernels(program)[0], model, H100, parse_pins(None), None)
    assert cost == problem.cost(hand.kernels[0])
    # A's rows 1 KiB apart move more bytes; A stays in L2 (256 KiB), so they are the
    # caches' (DRAM moves A once either way); at this size both wait one memory latency (the
    # first-load roof), so the predicted times may tie
    assert cost.cached == (("A", 256 * 256 * 4),) and cost.memory_s == optimized.costs[0].memory_s
    assert cost.cache_s > optimized.costs[0].cache_s
    assert mapping.predicted_time_s == cost.time_s >= optimized.predicted_time_s
    # the report says the decisions were given
    assert [r.outcome for r in mapping.solver] == [Outcome.GIVEN]
    text = str(mapping)
    assert "given, not solved" in text and "SCIP optimal" not in text
    assert "grid (64, 8, 1) x block (4, 32, 1) = 128 threads per block, 512 blocks" in text
    # and so does the header of the emitted file
    header = [line for line in kernel.source.splitlines() if line.startswith("//")]
    assert "// tp_kernel0: block (4, 32, 1), 128 threads" in header
    assert any(
        f"predicted {cost.time_s * 1e6:.4g} us" in line and "decisions given, not solved" in line
        for line in header
    )


def test_an_optimized_mapping_compiled_again_keeps_scip_s_report():
    program, optimized = _transpose()
    mapping = polymap.compile(program, optimized).mapping
    assert not mapping.given and mapping.solver == optimized.solver
    assert mapping.costs == optimized.costs and mapping.proof == optimized.proof


def test_emit_cuda_refuses_a_mapping_without_its_own_proof():
    _, optimized = _transpose()
    with pytest.raises(ArgumentError, match="carries no proof of its own decisions"):
        emit_cuda(_by_hand(optimized))  # edited after optimize: the proof is of other decisions
    with pytest.raises(ArgumentError, match="carries no proof"):
        emit_cuda(replace(optimized, proof=None))
    with pytest.raises(ArgumentError, match="carries no proof"):
        emit_cuda(replace(optimized, context="N >= 300"))  # proved for other sizes
    short = replace(optimized.proof, kernels=())
    with pytest.raises(ArgumentError, match="carries no proof"):
        emit_cuda(replace(optimized, proof=short))  # a report without the kernel's proof
    assert emit_cuda(optimized).source  # its own proof: accepted


def test_the_header_prints_the_proof_it_carries():
    _, optimized = _transpose()
    proof = optimized.proof
    header = [line for line in emit_cuda(optimized).source.splitlines() if line.startswith("//")]
    kernel = proof.kernel("kernel0")
    assert f"//   proved: {kernel.summary()}" in header
    assert "// proved by isl for the bound sizes" in header
    for obligation in (Obligation.IN_BOUNDS, Obligation.RACE_FREE, Obligation.EXACTLY_ONCE):
        assert obligation.value in kernel.summary()
    # a report that lists less prints less: the text comes from the object, not a constant
    fewer = replace(proof, kernels=(replace(kernel, proved=kernel.of(Obligation.EXACTLY_ONCE)),))
    header = [
        line
        for line in emit_cuda(replace(optimized, proof=fewer)).source.splitlines()
        if line.startswith("//")
    ]
    assert "//   proved: exactly once (S0)" in header
    assert not any("race free" in line or "in bounds" in line for line in header)
