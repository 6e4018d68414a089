"""The ``polymap`` command.

``polymap check FILE [--size M=64 ...] [--context "N >= 256"]`` parses a program, builds
its polyhedral model and proves it valid (quasi-affine, in bounds, race free), printing
each statement's domain and accesses, the dependences and the par loops proved race free.
Exit status: 0 for a valid program, 1 with the error message for an invalid one, 2 for a
bad command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from polymap.errors import NotAffineError, PolymapError
from polymap.ir.nodes import Program
from polymap.ir.parse import load


def _size(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INTEGER (e.g. M=64), got {text!r}")
    return name.strip(), int(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polymap", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="prove a program valid and print its polyhedral model")
    check.add_argument("file", help="a .te program")
    check.add_argument("--size", action="append", type=_size, default=[], metavar="NAME=N",
                       help="bind a size parameter (repeatable)")
    check.add_argument("--context", default=None,
                       help="constraints on the unbound sizes, in isl syntax (e.g. 'N >= 256')")
    return parser


def bind_for_affinity(program: Program, analyze, **options):
    """Analyze ``program``; where a product with a symbolic size is not affine and that size
    has a default, bind the default and say so (flat buffers such as ``C[i * N + j]`` need
    N to be a number). Returns the model and the sizes bound this way."""
    bound: dict[str, int] = {}
    while True:
        try:
            return analyze(program, **options), bound
        except NotAffineError as err:
            defaults = {p.name: p.default for p in program.params if p.name in err.params}
            if not err.params or None in defaults.values():
                raise
            bound.update(defaults)
            program = program.bind(**defaults)


def _check(args: argparse.Namespace) -> int:
    from polymap.poly.model import analyze

    program = load(args.file).bind(**dict(args.size))
    model, bound = bind_for_affinity(program, analyze, context=args.context)
    if bound:
        names = ", ".join(f"{n} = {v}" for n, v in bound.items())
        print(f"note: bound {names} (default) to make flat indices affine; pass --size to choose")
    print(model.describe())
    print(f"{args.file}: valid")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"check": _check}[args.command](args)
    except PolymapError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
