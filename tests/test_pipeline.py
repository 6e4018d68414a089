"""The pipeline (``polymap/pipeline.py``): each (program, context) analyzed once, and the
steps meeting through the objects they pass along."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import polymap
import polymap.poly.model as poly_model
from polymap.ir.parse import load

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
    # the program as written, the program with accumulators in registers (proved, emitted),
    # and the latter with the cost sizes bound (SCIP and the cost model)
    mapped = kernel.mapping.program
    bound = mapped.bind(**dict(kernel.mapping.cost_sizes))
    assert set(calls) == {(program, None), (mapped, None), (bound, None)}
    assert mapped != program  # three reductions promoted: the rewrite is one of the three



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
    "codegen": {"ir", "poly", "targets"},
    "runtime": {"ir", "poly", "codegen", "reference", "targets"},
    "pipeline": {"ir", "transform", "poly", "targets", "mapping", "codegen"},
    "kernel": {"ir", "targets", "mapping", "codegen", "pipeline", "runtime"},
}
BASE = {"errors", "version"}
# Known edges against the rules, each with its reason; the test fails on any other, and on
# an entry here that the code no longer has (so that the list only shrinks).
EXCEPTIONS = {
    # the public name stays in mapping.solve for its importers; it calls up into the steps
    ("polymap.mapping.solve", "polymap.pipeline"),
    # until the mapped program (hardware relation, shared tiles, time layout) moves to
    # polymap/schedule/, which verify and codegen will both import
    ("polymap.codegen.cuda", "polymap.mapping.hardware"),
    ("polymap.codegen.cuda", "polymap.mapping.result"),
    ("polymap.codegen.cuda", "polymap.mapping.shared"),
    ("polymap.codegen.cuda", "polymap.mapping.space"),
    ("polymap.codegen.cuda", "polymap.mapping.staging"),
    ("polymap.codegen.schedule", "polymap.mapping.accesses"),
    ("polymap.codegen.schedule", "polymap.mapping.hardware"),
    ("polymap.codegen.schedule", "polymap.mapping.shared"),
    ("polymap.codegen.schedule", "polymap.mapping.space"),
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


def test_transforms_live_in_transform():
    assert not (PACKAGE / "ir" / "registers.py").exists() and not (PACKAGE / "ir" / "fold.py").exists()
    assert {p.name for p in (PACKAGE / "transform").glob("*.py")} >= {"registers.py", "fold.py"}
