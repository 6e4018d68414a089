"""TE text of a Program: what the parser reads back to an equal Program.

Einsum shorthand is printed as the explicit loops it stands for, and sizes fixed by
``Program.bind`` appear as numbers (their names are listed in a comment).
"""

from __future__ import annotations

from polymap.ir.nodes import Loop, New, Program, Stmt


def format_decl_shape(shape) -> str:
    return f"[{', '.join(map(str, shape))}]" if shape else ""


def format_program(program: Program) -> str:
    lines = [f"# program {program.name}"]
    if program.bindings:
        lines.append("# bound sizes: " + ", ".join(f"{n} = {v}" for n, v in program.bindings))
    if program.params:
        lines.append(
            "param "
            + ", ".join(p.name if p.default is None else f"{p.name} = {p.default}" for p in program.params)
        )
    lines.extend(str(a) for a in program.assumptions)
    for decl in program.buffers:
        lines.append(f"{decl.kind.value} {decl.name}: {decl.dtype.value}{format_decl_shape(decl.shape)}")
    lines.extend(format_block(program.body, 0))
    return "\n".join(lines) + "\n"


def format_block(stmts: tuple[Stmt, ...], depth: int) -> list[str]:
    pad = "  " * depth
    lines: list[str] = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            lines.append(f"{pad}{stmt.kind.value} {stmt.extent} {stmt.index} {{")
            lines.extend(format_block(stmt.body, depth + 1))
            lines.append(f"{pad}}}")
        elif isinstance(stmt, New):
            d = stmt.decl
            lines.append(f"{pad}new {d.name}: {d.dtype.value}{format_decl_shape(d.shape)}")
        else:
            # the IR keeps an if as the guard (and a data condition as the predicate) of
            # each statement in it: one if per statement
            text = str(stmt)
            for condition in (getattr(stmt, "predicate", None), getattr(stmt, "guard", None)):
                if condition is not None:
                    text = f"if {condition} {{ {text} }}"
            lines.append(f"{pad}{text}")
    return lines
