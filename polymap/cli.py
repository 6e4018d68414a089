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

from polymap.errors import PolymapError
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


def _load(args: argparse.Namespace):
    """The program of ``args.file`` with ``--size`` bound (and the defaults flat indices need)."""
    from polymap.poly.affinity import analyze_binding_defaults, binding_note

    program = load(args.file).bind(**dict(args.size))
    program, model, bound = analyze_binding_defaults(program, context=args.context)
    if bound:
        print(binding_note(bound))
    return program, model


def _check(args: argparse.Namespace) -> int:
    _, model = _load(args)
    print(model.describe())
    print(f"{args.file}: valid")
    return 0


def _map(args: argparse.Namespace) -> int:
    from polymap.mapping.solve import optimize

    program, _ = _load(args)
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
