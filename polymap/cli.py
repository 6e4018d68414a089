"""The ``polymap`` command.

``polymap check FILE [--size M=64 ...] [--context "N >= 256"]`` parses a program, builds
its polyhedral model and proves it valid (quasi-affine, in bounds, race free), printing
each statement's domain and accesses, the dependences and the par loops proved race free.

``polymap map FILE [--target h100] [--size ...] [--context ...] [--pin j=threadIdx.x ...]``
chooses the thread mapping with SCIP, proves it with isl and prints the mapped loop nest,
the cost table and SCIP's status, time, objective and dual bound.

Exit status: 0 on success, 1 with the error message for an invalid program or mapping,
2 for a bad command line.
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
    mapper = commands.add_parser("map", help="choose and prove the thread mapping, print the report")
    mapper.add_argument("file", help="a .te program")
    mapper.add_argument("--target", default="h100", help="GPU: h100 or h200 (default h100)")
    mapper.add_argument("--size", action="append", type=_size, default=[], metavar="NAME=N",
                        help="bind a size parameter (repeatable)")
    mapper.add_argument("--context", default=None, help="constraints on the unbound sizes (isl syntax)")
    mapper.add_argument("--pin", action="append", type=_pin, default=[], metavar="LOOP=DECISION",
                        help="pin a decision: j=threadIdx.x, i=blockIdx.y, i=blocked, j.threads=64, j.seq=2")
    mapper.add_argument("--time-limit", type=float, default=None, help="SCIP time limit per kernel (s)")
    bench = commands.add_parser("bench", help="measure the optimizer on models/ and record the raw results")
    bench.add_argument("models", nargs="*", help=".te files (default: every file in models/)")
    bench.add_argument("--target", default="h100")
    bench.add_argument("--repeats", type=int, default=3)
    bench.add_argument("-o", "--output", default=None, help="markdown file for the results")
    return parser


def _pin(text: str) -> tuple[str, str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected LOOP=DECISION (e.g. j=threadIdx.x or j.threads=64), got {text!r}")
    loop, _, field = key.strip().rpartition(".") if key.count(".") and key.split(".")[-1] in _PIN_FIELDS \
        else (key.strip(), "", "")
    return loop, field, value.strip()


_PIN_FIELDS = ("thread", "block", "threads", "seq", "distribution")


def _pins(items: list[tuple[str, str, str]]) -> dict:
    pins: dict = {}
    for loop, field, value in items:
        entry = pins.setdefault(loop, {})
        if field:
            entry[field] = int(value) if field in ("threads", "seq") and value.isdigit() else value
        else:
            from polymap.mapping.space import parse_pins

            for name, item in parse_pins({loop: value}).by_key[0][1].items():
                entry[name] = item
    return pins


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


def _map(args: argparse.Namespace) -> int:
    from polymap.mapping.solve import optimize
    from polymap.poly.model import analyze

    program = load(args.file).bind(**dict(args.size))
    _, bound = bind_for_affinity(program, analyze, context=args.context)
    if bound:
        names = ", ".join(f"{n} = {v}" for n, v in bound.items())
        print(f"note: bound {names} (default) to make flat indices affine; pass --size to choose")
        program = program.bind(**bound)
    mapping = optimize(program, args.target, pins=_pins(args.pin), context=args.context,
                       time_limit=args.time_limit)
    print(mapping)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from polymap.bench import bench_solver, solver_markdown

    models = [Path(m) for m in args.models] or sorted(Path("models").glob("*.te"))
    if not models:
        print("error: no models given and no models/*.te here", file=sys.stderr)
        return 1
    runs = bench_solver(models, target=args.target, repeats=args.repeats)
    text = solver_markdown(runs, target=args.target, command="polymap " + " ".join(sys.argv[1:]))
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"check": _check, "map": _map, "bench": _bench}[args.command](args)
    except PolymapError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
