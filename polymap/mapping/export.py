"""The mapping report as plain data (``polymap map --json``, :meth:`Mapping.to_json`): the
same content as the text report, every number as the code computed it, for scripts.

Times are in seconds (``*_s``) except SCIP's objective and dual bound, which are in
microseconds as SCIP optimized them (``*_us``). A bound or gap SCIP does not have (``-inf``,
``inf``) is ``null``: JSON has no infinity.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from polymap.ir.atomics import atomic_updates
from polymap.mapping.outcome import SolveReport
from polymap.mapping.result import KernelCost, Mapping
from polymap.mapping.space import KernelMapping

FORMAT_VERSION = 1  # bumped when a field changes meaning or is removed


def mapping_data(mapping: Mapping) -> dict[str, Any]:
    """The report of ``mapping`` as JSON-ready dicts, lists, strings and numbers."""
    report = mapping.proof
    return {
        "format": FORMAT_VERSION,
        "program": mapping.program.name,
        "target": {"name": mapping.target.name, "arch": mapping.target.sm_arch},
        "cost_sizes": dict(mapping.program.bindings + mapping.cost_sizes),
        "kernels": [
            _kernel(kernel, cost, solved, mapping)
            for kernel, cost, solved in zip(mapping.kernels, mapping.costs, mapping.solver)
        ],
        "predicted_time_s": mapping.predicted_time_s,
        # the scatters' atomic updates, and whether a float one was allowed (its order varies)
        "deterministic": mapping.deterministic,
        "atomic_updates": [
            {"statement": s.name, "buffer": s.buffer, "operator": s.op.value}
            for s in atomic_updates(mapping.program)
        ],
        "band_choices": [
            {
                "loops": list(choice.indices),
                "options": _options(choice.options, "with_axes", list),
                "chosen": choice.chosen,
            }
            for choice in mapping.band_choices
        ],
        "splits": [
            {
                "loop": choice.loop,
                "target": choice.target,
                "options": _options(choice.options, "split"),
                "chosen": choice.chosen,
                "parts": choice.split.parts if choice.split is not None else 1,
                "form": choice.split.form.value if choice.split is not None else None,
                "atomic": choice.split is not None and choice.split.atomic,
                "chunk": choice.split.chunk(choice.extent)
                if choice.split is not None and choice.split.form.value == "blocked"
                else None,
                "reorders": choice.reorders and choice.split is not None,
                "online": list(choice.online),
                "pinned": choice.pinned,
            }
            for choice in mapping.splits
        ],
        "notes": list(mapping.notes),
        # what --fuse / fuse= chose (null: none asked)
        "fusion": mapping.fusion.to_json() if mapping.fusion is not None else None,
        "scans": [
            {
                "loop": choice.loop,
                "statements": choice.statement,
                "options": _options(choice.options, "form"),
                "chosen": choice.chosen,
                "passes": choice.rewritten,
                "pinned": choice.pinned,
            }
            for choice in mapping.scans
        ],
        "proof": {
            "proved": mapping.proved,
            "sizes": report.sizes if report is not None else None,
            "launch_order": [p.text for p in report.launch_order] if report is not None else [],
        },
    }


def _options(options, name: str, what=lambda w: w) -> list[dict[str, Any]]:
    """A choice's options (what each is, SCIP's objective for the program, why it has no
    mapping), ``name`` the key of what it is."""
    return [
        {name: what(w), "objective_s": objective, "why_none": why or None} for w, objective, why in options
    ]


def _kernel(mapped: KernelMapping, cost: KernelCost, solved: SolveReport, mapping: Mapping) -> dict[str, Any]:
    kernel = mapped.kernel
    try:
        proof = mapping.proof.kernel(kernel.name) if mapping.proof is not None else None
    except KeyError:
        proof = None
    return {
        "name": kernel.name,
        "host_loops": [{"index": h.index, "extent": str(h.extent)} for h in kernel.host_loops],
        "grid": list(mapped.grid_dim()),  # (1, 1, 1) for a serial kernel: no loops
        "block": list(mapped.block_dim()),
        "threads_per_block": mapped.threads_per_block,
        "blocks": mapped.blocks,
        "loops": [
            {
                "index": loop.index,
                "thread_axis": loop.thread_axis.value,
                "block_axis": loop.block_axis.value,
                "threads": loop.threads,
                "seq": loop.seq,
                "distribution": loop.distribution.value,
                "group": loop.group,  # V of a grouped loop, 1 otherwise (``LoopMapping``)
                "step": loop.step,  # between neighbouring threads' points: 1, the group or S
                "blocks": loop.blocks,
                "extent": str(loop.extent),
                "guard": loop.guard,
            }
            for loop in mapped.loops
        ],
        "interleaved": mapped.interleaved,
        "lanes": mapped.lanes,
        "spread": [
            {
                "index": sp.index,
                # its position in the thread body, then in each loop around it
                "path": list(sp.path),
                "statements": list(sp.statements),
                "accumulators": [{"buffer": name, "op": op.value} for name, op in sp.accumulators],
                "broadcasts": list(sp.broadcasts),
                "shared": list(sp.shared),
                # online sums: a maximum and the sums kept relative to it, combined as a group
                "online": [{"maximum": top, "sums": list(totals)} for top, totals in sp.online],
                "reassociates": sp.reassociates,
            }
            for sp in mapped.spread
        ],
        "staging": None
        if mapped.staging is None
        else {
            "loop": mapped.staging.loop,
            "tile": mapped.staging.tile,
            "buffers": list(mapped.staging.buffers),
            "transposed": list(mapped.staging.transposed),
            "copy_vectors": dict(mapped.staging.copy_vectors),
            "slots": mapped.staging.slots,  # 2: double-buffered
        },
        "cost": {
            **{f.name: getattr(cost, f.name) for f in dataclasses.fields(cost) if f.name != "accesses"},
            "objective_s": cost.objective_s,
            "accesses": [dataclasses.asdict(a) for a in cost.accesses],
        },
        "solver": {
            "outcome": solved.outcome.value,
            "status": solved.status,
            "solve_time_s": solved.solve_time_s,
            "objective_us": finite_or_none(solved.objective),
            "dual_bound_us": finite_or_none(solved.dual_bound),
            "gap": finite_or_none(solved.gap),
            "solutions": solved.n_solutions,
        },
        "proof": None
        if proof is None
        else {
            "launch": proof.launch,
            "proved": [
                {"obligation": p.obligation.value, "subject": p.subject, "text": p.text} for p in proof.proved
            ],
        },
    }


def finite_or_none(value: float | None) -> float | None:
    """``value``, or None where JSON has no number for it (None, an infinity, NaN)."""
    return value if value is not None and math.isfinite(value) else None
