"""A proved mapping with the model of its program: what the code generator prints.

The code generator reads the decisions (``Mapping``, ``KernelMapping``: block shapes, loop
formulas, staging) through this module and the relations built from them through
``hardware``, ``shared`` and ``kernel``; it never reaches into the mapping stage itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from polymap.errors import ArgumentError, InternalError
from polymap.ir.nodes import Program
from polymap.mapping.result import Mapping
from polymap.mapping.space import WARP_LANES, KernelMapping, SpreadLoop
from polymap.poly.model import PolyModel, analyze


@dataclass(frozen=True, slots=True, eq=False)
class ScheduledProgram:
    """A mapping that carries the proof of its own decisions, and the model of its
    (rewritten) program under the mapping's context."""

    mapping: Mapping
    model: PolyModel

    @property
    def program(self) -> Program:
        return self.mapping.program

    @property
    def kernels(self) -> tuple[KernelMapping, ...]:
        return self.mapping.kernels


def schedule_program(mapping: Mapping, model: PolyModel | None = None) -> ScheduledProgram:
    """Check that ``mapping`` is proved (``verify`` ran on these very decisions) and pair it
    with its model (``model`` when the caller has it, as the pipeline does, else built)."""
    if not isinstance(mapping, Mapping):
        raise ArgumentError(f"emit_cuda takes a polymap Mapping, got {type(mapping).__name__}")
    if not mapping.proved:
        raise ArgumentError(
            f"emit_cuda: the mapping of program '{mapping.program.name}' carries no proof of its own "
            "decisions (edited or made by hand after verify): compile(program, mapping) proves it first"
        )
    program = mapping.program
    if model is None:
        model = analyze(program, context=mapping.context)
    elif model.program != program:
        raise InternalError(
            f"emit_cuda: the model given is of program '{model.program.name}', not of the "
            f"mapped program '{program.name}'"
        )
    return ScheduledProgram(mapping, model)


__all__ = ["WARP_LANES", "KernelMapping", "Mapping", "ScheduledProgram", "SpreadLoop", "schedule_program"]
