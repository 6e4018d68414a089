"""The pipeline (``polymap/pipeline.py``): each (program, context) analyzed once, and the
steps meeting through the objects they pass along."""

from __future__ import annotations

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

