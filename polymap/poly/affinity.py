"""Binding the sizes that flat indices need, from their defaults.

``C[i * N + j]`` is affine only once N is a number. Tools that take a program file as it
is (``polymap check``, ``map``, ``bench``) bind such sizes to their defaults, and say so;
the API (:func:`polymap.analyze`) never does it silently.
"""

from __future__ import annotations

from polymap.errors import NotAffineError
from polymap.ir.nodes import Program
from polymap.poly.model import PolyModel, analyze


def analyze_binding_defaults(
    program: Program, *, context: str | None = None
) -> tuple[Program, PolyModel, dict[str, int]]:
    """Analyze ``program``; where a product with a symbolic size is not affine and that size
    has a default, bind the default and retry. Returns the program analyzed, its model and
    the sizes bound this way; a size without a default keeps the NotAffineError."""
    bound: dict[str, int] = {}
    while True:
        try:
            return program, analyze(program, context=context), bound
        except NotAffineError as err:
            defaults = {p.name: p.default for p in program.params if p.name in err.params}
            if not err.params or None in defaults.values():
                raise
            bound.update(defaults)
            program = program.bind(**defaults)


def binding_note(bound: dict[str, int]) -> str:
    names = ", ".join(f"{n} = {v}" for n, v in bound.items())
    return f"note: bound {names} (default) to make flat indices affine; pass --size to choose"
