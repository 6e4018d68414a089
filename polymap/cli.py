"""The ``polymap`` command.

``polymap check FILE [--size M=64 ...] [--context "N >= 256"]`` parses a program, builds
its polyhedral model and proves it valid (quasi-affine, in bounds, race free), printing
each statement's domain and accesses, the dependences and the par loops proved race free.

``polymap map FILE [--target h100] [--size ...] [--context ...] [--pin j=threadIdx.x ...]``
chooses the thread mapping with SCIP, proves it with isl and prints the mapped loop nest,
the cost table and SCIP's status, time, objective and dual bound.

``polymap emit FILE [-o OUT.cu] [--target h100] [--size ...] [--context ...] [--pin ...]``
optimizes like ``map``, compiles the mapping to CUDA C and writes the standalone,
deterministic source (nvcc-compilable, one ``extern "C"`` launcher) to OUT or stdout; a
line names the launcher and its signature.

``polymap run FILE [--size ...] [--context ...] [--pin ...] [--target h100] [--host]
[--seed 0] [--repeat 10]`` optimizes and compiles like ``emit``, runs the kernel on random
inputs (on the GPU when there is one, else on the host's C++ emulation of the same source)
and compares every output with the NumPy reference; exit status 1 on a mismatch.

``polymap inspect FILE [same options as map]`` optimizes and compiles like ``emit``, then
compiles the source to machine code for the target's architecture with NVRTC and reports,
per kernel, what ptxas made of it (registers, stack, shared memory, occupancy, the hot loop's
instruction mix), read with cuobjdump: no GPU needed.

``polymap plan FILE --capacity 16K [--size ...] [--link Q=dram ...]`` reads the program as
a chain of einsums and prints the tiling and fusion that moves the fewest bytes off chip
within the capacity (elements, or bytes with a unit: 64KiB), proved optimal by SCIP.

``polymap bench [MODELS ...] [-o FILE]`` measures the optimizer on models/ and records the
raw results.

Exit status: 0 on success, 1 with the error message for an invalid program or mapping,
2 for a bad command line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence

from polymap.errors import PolymapError
from polymap.ir.parse import load
from polymap.progress import reporting, step


def _size(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INTEGER (e.g. M=64), got {text!r}")
    return name.strip(), int(value)


def _parser() -> argparse.ArgumentParser:
    from polymap.version import __version__

    parser = argparse.ArgumentParser(prog="polymap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"polymap {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="prove a program valid and print its polyhedral model")
    check.add_argument("file", help="a .te program")
    _size_option(check)
    check.add_argument(
        "--context", default=None, help="constraints on the unbound sizes, in isl syntax (e.g. 'N >= 256')"
    )
    mapper = commands.add_parser("map", help="choose and prove the thread mapping, print the report")
    mapper.add_argument("file", help="a .te program")
    _mapping_options(mapper)
    _proofs_option(mapper)
    mapper.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON (the same content; notes go to stderr)",
    )
    mapper.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="also draw the mapping (per kernel: which block, warp and thread run which iterations, "
        "and the sectors a warp's first request of each access touches) into FILE (.png, .svg or "
        ".pdf; needs matplotlib, the plot extra)",
    )
    emit = commands.add_parser("emit", help="optimize, compile and write the CUDA C source")
    emit.add_argument("file", help="a .te program")
    emit.add_argument(
        "-o", "--output", default=None, metavar="OUT.cu", help="file for the source (default: stdout)"
    )
    emit.add_argument(
        "--header",
        default=None,
        metavar="OUT.h",
        help="also write a C/C++ header with the launcher's prototype and what each argument is",
    )
    _mapping_options(emit)
    run = commands.add_parser(
        "run", help="optimize, compile, run on random inputs and compare with the reference"
    )
    run.add_argument("file", help="a .te program")
    _mapping_options(run)
    _proofs_option(run)
    run.add_argument(
        "--json",
        action="store_true",
        help="print the mapping and the run (each output against the reference, where and how long it ran) as JSON",
    )
    run.add_argument(
        "--host",
        action="store_true",
        help="run on the host (C++ emulation of the CUDA source) even when a GPU is available",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    run.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="run the kernels without computing the NumPy reference: the outputs are not checked",
    )
    run.add_argument(
        "--repeats",
        "--repeat",
        dest="repeats",
        type=_positive,
        default=None,
        help="timed GPU runs (default 10; the host run checks correctness once)",
    )
    inspect = commands.add_parser(
        "inspect",
        help="optimize and compile, then report every kernel's machine code for the target "
        "(registers, local memory, occupancy, hot loop instruction mix; no GPU needed)",
    )
    inspect.add_argument("file", help="a .te program")
    _mapping_options(inspect)
    planner = commands.add_parser(
        "plan",
        help="tile and fuse the program's einsum chain under an on-chip capacity (SCIP, proved optimal)",
    )
    _chain_arguments(
        planner, "SCIP's time limit (default 60); at the limit the best plan found is printed with its gap"
    )
    planner.add_argument(
        "--capacity",
        required=True,
        help="the on-chip store: elements (16384, 16K, 512K) or bytes with a unit (64KiB, 228KB; K is 1024)",
    )
    _link_option(planner)
    _min_band_tiles_option(planner, 1)
    planner.add_argument("--json", action="store_true", help="print the plan as JSON (the same content)")
    planner.add_argument(
        "--program",
        action="store_true",
        help="also print the plan as a TE program (tiles as block-local buffers, copies at the levels), "
        "with isl's count of its copies checked against the plan's traffic",
    )
    front = commands.add_parser(
        "frontier",
        help="the fewest off-chip bytes at each capacity, unfused, untiled-fused and tiled-fused (SCIP per point)",
    )
    _chain_arguments(front, "SCIP's time limit per point (default 60)")
    front.add_argument(
        "--capacities",
        required=True,
        help="a comma-separated list (4K,16K,64K) or a range that doubles from its low end to its high "
        "end (1K..1M; the high end a power of two times the low), in elements or, with a unit, bytes "
        "(16KiB..1MiB)",
    )
    front.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="also draw the frontier (.png, .svg or .pdf; needs matplotlib)",
    )
    bench = commands.add_parser("bench", help="measure the optimizer on models/ and record the raw results")
    bench.add_argument("models", nargs="*", help=".te files (default: every file in models/)")
    bench.add_argument("--target", default="h100", help=_TARGET_HELP)
    bench.add_argument(
        "--repeats",
        type=_positive,
        default=3,
        help="optimizer runs per model; the median is recorded (default 3)",
    )
    bench.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help=_TIME_LIMIT_HELP)
    bench.add_argument(
        "-o", "--output", default=None, help="file for the results (markdown, or JSON with --json)"
    )
    bench.add_argument(
        "--json",
        action="store_true",
        help="the optimizer runs as JSON (per model: sizes, median wall time, per kernel SCIP's status, time, "
        "objective, bound, gap); with --kernels the kernels' record as JSON (every sample, the medians and "
        "ratios, how each was timed, the machine code's figures)",
    )
    bench.add_argument(
        "--kernels",
        action="store_true",
        help="time the generated kernels against cuBLAS and copies on the GPU (on the host "
        "without one: correctness only, GPU figures pending); with models named, each model at its "
        "default sizes against a device-to-device copy of its compulsory bytes",
    )
    bench.add_argument("--host", action="store_true", help="with --kernels: the host correctness run only")
    bench.add_argument(
        "--plan",
        action="store_true",
        help="the fusion planner on seed 000's attention chain (4 sizes x 3 capacities) and the Orojenesis "
        "2-GEMM, each planned free and unfused in the same run",
    )
    bench.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="also draw the predicted roofline of every kernel of the models into FILE (.png, .svg or "
        ".pdf; needs matplotlib, the plot extra); with --kernels, each case predicted and, on a GPU, measured",
    )
    for command in (check, mapper, emit, run, inspect, planner, front, bench):
        command.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            help="no progress lines on stderr (by default a step over a second says how long it "
            "took, and SCIP reports its best mapping and bound every 2 s while it solves)",
        )
    return parser


_TARGET_HELP = (
    "GPU: h100, h200, a100 or l40s, or a .toml file of GpuTarget's fields "
    '(base = "h100" starts from a known one; see docs/targets.md) (default h100)'
)
_TIME_LIMIT_HELP = (
    "SCIP's time limit per kernel solve in seconds (default 30), and with --fuse per plan; at the "
    "limit the best mapping (or plan) found is used and reported as 'timelimit' with its gap"
)


def _mapping_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``map``, shared by ``emit``, ``run`` and ``inspect``."""
    parser.add_argument("--target", default="h100", help=_TARGET_HELP)
    _size_option(parser)
    parser.add_argument("--context", default=None, help="constraints on the unbound sizes (isl syntax)")
    parser.add_argument(
        "--pin",
        action="append",
        type=_pin,
        default=[],
        metavar="LOOP=DECISION",
        help="pin a decision: j=threadIdx.x, i=blockIdx.y, i=blocked, j.threads=64, j.seq=2, j.group=4 (a thread's points in groups of 4 neighbours; 1: cyclic, S: blocked), "
        "k.tile=16, k.stage=A,B (or none), k.transpose=A (or none), k.copy=1 (element-wise copies; 4: float4 at most), k.slots=2 (double-buffered tiles: the next copy in flight; 1: copy, then compute), i.interleave=yes (the kernel's points in outer-product order), i.lanes=32 (a warp per point: the body's reductions over its lanes; 64 to 1024: that many lanes, a block per point; 1: a thread per point), k.split=64 (a reduction loop in 64 parts and a combine; 1: never split), j.passes=yes (a select scan such as an argmax as exact min=/max= passes; no: as written)",
    )
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help=_TIME_LIMIT_HELP)
    parser.add_argument(
        "--fuse",
        default=None,
        metavar="CAPACITY",
        help="first tile and fuse the einsum chain within CAPACITY (as `polymap plan`; 16K elements, 64KiB "
        "bytes) and map the segments it fuses a tile at a time as bands, the other nests as written",
    )
    _link_option(parser, " (with --fuse)")
    _min_band_tiles_option(parser, None, " (with --fuse)")
    parser.add_argument(
        "--fuse-if",
        choices=("faster", "always", "fastest"),
        default=None,
        help="with --fuse: map the fused program only where the cost model predicts it faster than the "
        "program as written (faster, the default: both are mapped to compare), always, or plan once per "
        "way of linking the intermediates (dram, tiled, whole; --link ones stay) and map the program "
        "predicted fastest of those plans' and the program as written (fastest)",
    )
    parser.add_argument(
        "--no-reassociate",
        dest="reassociate",
        action="store_false",
        help="keep every float sum in the program's order: no warp's lanes share a float += or *= "
        "(max= and min= and integer sums still may: they are exact in any order)",
    )
    parser.add_argument(
        "--nondeterministic",
        dest="deterministic",
        action="store_false",
        help="allow a scatter into a float buffer (O[I[i]] += x): its atomic updates meet in an order, "
        "and so round, differently from run to run",
    )


def _proofs_option(parser: argparse.ArgumentParser) -> None:
    """``--proofs`` for the commands that print the mapping report."""
    parser.add_argument(
        "--proofs",
        action="store_true",
        help="list every obligation isl proved of the mapping (default: counted in one line)",
    )


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _size_option(
    parser: argparse.ArgumentParser, description: str = "bind a size parameter (repeatable)"
) -> None:
    """``--size NAME=N``, repeatable, as every command that reads a program takes it."""
    parser.add_argument("--size", action="append", type=_size, default=[], metavar="NAME=N", help=description)


def _chain_arguments(parser: argparse.ArgumentParser, time_help: str) -> None:
    """The arguments of the planner's commands (``plan``, ``frontier``): the program, its
    sizes and SCIP's time limit."""
    parser.add_argument("file", help="a .te program whose statements form a chain of einsums")
    _size_option(parser, "bind a size parameter (repeatable; sizes with defaults take them)")
    parser.add_argument("--time-limit", type=_seconds, default=None, metavar="SECONDS", help=time_help)


def _seconds(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > 1e9:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _link_option(parser: argparse.ArgumentParser, scope: str = "") -> None:
    parser.add_argument(
        "--link",
        action="append",
        type=_link,
        default=[],
        metavar="BUFFER=MODE",
        help="pin an intermediate of the plan: Q=dram (written back), Q=tiled (fused, a tile at a time), "
        f"Q=whole (on chip whole){scope}",
    )


def _min_band_tiles_option(parser: argparse.ArgumentParser, default: int | None, suffix: str = "") -> None:
    parser.add_argument(
        "--min-band-tiles",
        type=_positive,
        default=default,
        metavar="N",
        help="a segment fused a tile at a time has at least N band tiles (on a GPU, its kernel's blocks: "
        f"132 fills an H100's SMs once); a link whose band cannot is not tiled (default 1){suffix}",
    )


def _once(option: str, pairs: list[tuple[str, object]]) -> dict:
    """A repeatable ``NAME=VALUE`` option's pairs as a dict; a name given twice is refused
    (the last would win without a word)."""
    from polymap.errors import ArgumentError

    given = dict(pairs)
    if len(given) < len(pairs):
        twice = sorted({b for b, _ in pairs if sum(1 for c, _ in pairs if c == b) > 1})
        raise ArgumentError(f"{option} {', '.join(twice)} given more than once")
    return given


def _links(args: argparse.Namespace) -> dict[str, str]:
    """``--link``'s pins as ``plan``'s ``links``; a buffer given twice is refused."""
    return _once("--link", args.link)


def _sizes(args: argparse.Namespace) -> dict[str, int]:
    """``--size``'s bindings; a size given twice is refused."""
    return _once("--size", args.size)


def _link(text: str) -> tuple[str, str]:
    buffer, sep, mode = text.partition("=")
    if not sep or not buffer.strip() or mode.strip() not in ("dram", "tiled", "whole"):
        raise argparse.ArgumentTypeError(f"expected BUFFER=dram, BUFFER=tiled or BUFFER=whole, got {text!r}")
    return buffer.strip(), mode.strip()


def _pin(text: str) -> tuple[str, str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(
            f"expected LOOP=DECISION (e.g. j=threadIdx.x or j.threads=64), got {text!r}"
        )
    loop, _, field = (
        key.strip().rpartition(".")
        if key.count(".") and key.split(".")[-1] in _PIN_FIELDS
        else (key.strip(), "", "")
    )
    return loop, field, value.strip()


_PIN_FIELDS = (
    "thread",
    "block",
    "threads",
    "seq",
    "distribution",
    "group",
    "tile",
    "stage",
    "transpose",
    "copy",
    "slots",
    "interleave",
    "lanes",
    "split",
    "passes",
)


def _pins(items: list[tuple[str, str, str]]) -> dict:
    pins: dict = {}
    for loop, field, value in items:
        entry = pins.setdefault(loop, {})
        if field:
            if field in ("stage", "transpose"):  # k.stage=A,B (k.stage=none: nothing staged)
                entry[field] = (
                    [] if value.lower() == "none" else [b.strip() for b in value.split(",") if b.strip()]
                )
            else:
                entry[field] = (
                    int(value)
                    if field in ("threads", "seq", "group", "tile", "copy", "slots", "lanes", "split")
                    and value.isdigit()
                    else value
                )
        else:
            from polymap.mapping.space import parse_pins

            for name, item in parse_pins({loop: value}).by_key[0][1].items():
                entry[name] = item
    return pins


def _load(args: argparse.Namespace, note=None, fusion_note: bool = True):
    """The program of ``args.file`` with ``--size`` bound (and the defaults flat indices need);
    the note saying which defaults were bound goes to ``note`` (default: stdout), as does
    what ``--fuse`` chose unless ``fusion_note`` is false (a report that carries it)."""
    from polymap.errors import ArgumentError
    from polymap.poly.affinity import analyze_binding_defaults, binding_note

    program = load(args.file).bind(**_sizes(args))
    args.chosen_mapping = args.fusion_choice = None
    if getattr(args, "fuse_if", None) is not None and args.fuse is None:
        raise ArgumentError(
            f"--fuse-if {args.fuse_if} chooses between a fused program and the program as written; give --fuse too"
        )
    if getattr(args, "link", None) and args.fuse is None:
        raise ArgumentError("--link pins an intermediate of the plan; give --fuse too")
    if getattr(args, "min_band_tiles", None) is not None and args.fuse is None:
        raise ArgumentError("--min-band-tiles shapes the plan's fused bands; give --fuse too")
    if getattr(args, "fuse", None) is not None:
        from polymap.fused import choose_fusion
        from polymap.plan.planner import Capacity

        try:
            Capacity.parse(args.fuse)
        except ArgumentError as err:
            raise ArgumentError(f"--fuse: {err}") from None

        choice = choose_fusion(
            program,
            args.fuse,
            args.target,
            fuse_if=args.fuse_if,
            links=_links(args),
            min_band_tiles=args.min_band_tiles,
            **_solver_options(args),
        )
        if fusion_note:
            print(choice.note(), file=note or sys.stdout)
        # a fused program's kernels are checked against the program as written
        args.written_program = program.bind_defaults() if choice.fused else None
        program, args.chosen_mapping, args.fusion_choice = choice.program, choice.mapping, choice
    program, model, bound = analyze_binding_defaults(program, context=args.context)
    if bound:
        print(binding_note(bound), file=note or sys.stdout)
    return program, model


def _check(args: argparse.Namespace) -> int:
    from polymap.ir.online_sums import infinite_start_notes
    from polymap.ir.zero_starts import zero_start_notes

    program, model = _load(args)
    print(model.describe())
    for note in zero_start_notes(program) + infinite_start_notes(program):
        print(note)
    print(f"{args.file}: valid")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from polymap.plan.planner import DEFAULT_TIME_LIMIT_S, plan

    program = load(args.file).bind(**_sizes(args))
    limit = DEFAULT_TIME_LIMIT_S if args.time_limit is None else args.time_limit
    with step("plan: SCIP"):
        result = plan(
            program, args.capacity, links=_links(args), time_limit_s=limit, min_band_tiles=args.min_band_tiles
        )
    if args.json:
        import json

        print(json.dumps(result.to_json(), indent=2, allow_nan=False))
    else:
        print(result)
    if args.program:
        from polymap.plan.program import checked_planned_program

        planned = checked_planned_program(program, result)
        copies = sum(c.reads + c.writes for c in result.accounting.tensors)
        print(
            f"\n# the plan as a program: isl counts {copies} element copies in its {len(planned.copies)} copy "
            "statements, the plan's traffic tensor by tensor",
            file=sys.stderr if args.json else sys.stdout,
        )
        print(str(planned.program), file=sys.stderr if args.json else sys.stdout)
    return 0


def _frontier(args: argparse.Namespace) -> int:
    from polymap.plan.frontier import capacity_list, frontier
    from polymap.plan.planner import DEFAULT_TIME_LIMIT_S

    program = load(args.file).bind(**_sizes(args))
    capacities = capacity_list(args.capacities)
    if args.plot is not None:
        from polymap.plot import checked_plot_path

        checked_plot_path(args.plot)  # before the solves: a bad path costs nothing
    limit = DEFAULT_TIME_LIMIT_S if args.time_limit is None else args.time_limit
    with step("frontier: SCIP"):
        result = frontier(program, capacities, time_limit_s=limit)
    print(result.table())
    if args.plot is not None:
        from polymap.plot import plot_frontier

        sys.stdout.flush()
        print(f"drew the frontier into {plot_frontier(result, args.plot)}", file=sys.stderr)
    return 0


def _map(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from polymap.mapping.solve import optimize

    if args.plot is not None:
        from polymap.plot import checked_plot_path

        checked_plot_path(args.plot)  # before the plan and the solve: a bad path costs nothing
    program, _ = _load(args, note=sys.stderr if args.json else None, fusion_note=False)
    mapping = args.chosen_mapping or optimize(program, args.target, **_solver_options(args))
    if args.fusion_choice is not None:  # the report says what --fuse chose
        mapping = replace(mapping, fusion=args.fusion_choice.summary())
    if args.json:
        import json

        print(json.dumps(mapping.to_json(), indent=2, allow_nan=False))
    else:
        print(mapping.report(proofs=args.proofs))
    if args.plot is not None:  # after the report: a picture that fails loses nothing
        from polymap.plot import plot_mapping

        sys.stdout.flush()
        print(f"drew the mapping into {plot_mapping(mapping, args.plot)}", file=sys.stderr)
    return 0


def _compile(args: argparse.Namespace, program):
    """The kernel of ``program`` (as ``_load`` returns it): optimized with the command's
    target, pins, context and time limit, then compiled to CUDA C."""
    import polymap

    if args.fusion_choice is not None:  # its mapping carries what --fuse chose
        from polymap.fused import compile_choice

        return compile_choice(args.fusion_choice, args.target, **_solver_options(args))
    # one pipeline run: optimizing first and passing the mapping would prove it twice
    return polymap.compile(program, None, args.target, **_solver_options(args))


def _solver_options(args: argparse.Namespace) -> dict:
    """The options of ``optimize`` the mapping commands share: pins, context, SCIP's time
    limit, and whether lanes may reorder a float sum."""
    return {
        "pins": _pins(args.pin),
        "context": args.context,
        "time_limit": args.time_limit,
        "reassociate": args.reassociate,
        "deterministic": args.deterministic,
    }


def _signature(kernel) -> str:
    """The launcher's C signature, as a C++ caller declares it."""
    params = [f"{a.c_type.replace(' __restrict__', '')} {a.c_name}" for a in kernel.cuda.arguments]
    return f"int {kernel.launcher}({', '.join([*params, 'cudaStream_t stream'])})"


def _emit(args: argparse.Namespace) -> int:
    from pathlib import Path

    to_stdout = args.output is None
    _check_output_paths(args)  # before any work, and before anything is written
    program, _ = _load(args, note=sys.stderr if to_stdout else sys.stdout)
    kernel = _compile(args, program)
    count = len(kernel.mapping.kernels)
    if to_stdout:
        sys.stdout.write(kernel.source)
        sys.stdout.flush()
    else:
        _write(args.output, kernel.source)
    if args.header is not None:
        source_name = "the emitted .cu file" if to_stdout else Path(args.output).name
        _write(args.header, kernel.header(source_name))
    line = (
        f"wrote {'<stdout>' if to_stdout else args.output}: {count} kernel{'s' if count != 1 else ''}, "
        f"launcher {_signature(kernel)}"
    )
    if args.header is not None:
        line += f"; header {args.header}"
    print(line, file=sys.stderr if to_stdout else sys.stdout)
    return 0


def _check_output_paths(args: argparse.Namespace) -> None:
    """``-o`` and ``--header`` must be files that can be written, and none may be the program
    read or the other output (it would be overwritten)."""
    from pathlib import Path

    from polymap.errors import ArgumentError

    outputs = [
        (option, path)
        for option, path in (("-o", args.output), ("--header", args.header))
        if path is not None
    ]
    taken = [("the program", args.file)]
    for option, path in outputs:
        target = Path(path)
        if not path or target.is_dir():
            raise ArgumentError(f"{option} {path!r} is not a file name")
        for what, other in taken:
            if target.resolve() == Path(other).resolve():
                raise ArgumentError(f"{option} {path} is {what}: writing it would overwrite it")
        if not target.resolve().parent.is_dir():
            raise ArgumentError(f"cannot write {option} {path}: no folder {target.resolve().parent}")
        taken.append((f"the {option} file", path))


def _write(path: str, text: str) -> None:
    from pathlib import Path

    from polymap.errors import ArgumentError

    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise ArgumentError(f"cannot write {path}: {exc.strerror or exc}") from None


def _inspect(args: argparse.Namespace) -> int:
    program, _ = _load(args)
    kernel = _compile(args, program)
    print(kernel.machine_code())
    return 0


def _concrete_sizes(program) -> dict[str, int]:
    """A value for every size still unbound: its default; a size without one is an error."""
    from polymap.errors import ArgumentError

    missing = [p.name for p in program.params if p.default is None]
    if missing:
        names = ", ".join(missing)
        raise ArgumentError(
            f"size{'s' if len(missing) > 1 else ''} {names} of program '{program.name}' "
            f"{'have' if len(missing) > 1 else 'has'} no default and {'were' if len(missing) > 1 else 'was'} "
            f"not given: pass --size {missing[0]}=VALUE"
            + (" (one --size per size)" if len(missing) > 1 else ""),
            **program.error_context(),
        )
    return {p.name: p.default for p in program.params}


def _unchecked(name: str) -> dict:
    """An output ``run --no-reference`` did not compare: ``ok`` is None (neither a match nor
    a mismatch) and ``checked`` false."""
    return {"output": name, "ok": None, "checked": False, "text": f"{name}: not checked (--no-reference)"}


def _gpu_name() -> str:
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - the name is only for the report
        return "(unknown)"


def _in_background(work):
    """``work()`` started in a daemon thread, in a copy of this context (its progress lines go
    to the same reporter); the function returned waits for it and gives its result or raises
    its error. NumPy and the host kernels' C++ (its compiler a subprocess, its launcher called
    through ctypes) run without the GIL, so the two overlap on two cores. A daemon: a run that
    fails first does not wait for the reference to end."""
    import contextvars
    import threading

    context = contextvars.copy_context()
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = context.run(work)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="polymap-reference", daemon=True)
    thread.start()

    def result():
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result


def _run(args: argparse.Namespace) -> int:
    import statistics

    from polymap.compare import compare_output
    from polymap.reference import reference  # looked up per call: tests replace it
    from polymap.runtime.arguments import random_inputs
    from polymap.runtime.gpu import gpu_available
    from polymap.runtime.host_sizes import host_run_sizes

    notes = sys.stderr if args.json else sys.stdout  # --json: stdout is the JSON document only
    program, model = _load(args, note=notes, fusion_note=False)  # the report or JSON says it
    sizes = _concrete_sizes(program)  # before optimizing: a missing size fails fast
    kernel = _compile(args, program)
    if not args.json:
        print(kernel.mapping.report(proofs=args.proofs))
    on_gpu = not args.host and gpu_available()
    asked = dict(sizes)
    if not on_gpu:
        fused = args.fusion_choice is not None and args.fusion_choice.fused
        fit = host_run_sizes(
            model,
            sizes,
            given={name for name, _ in args.size},
            kept_by="the sizes --fuse planned at (a fused program's sizes are numbers)" if fused else None,
        )
        if fit.note() is not None:
            print(fit.note(), file=notes)
        sizes = fit.sizes
    inputs = random_inputs(program, sizes, args.seed)
    if not args.host and not on_gpu:
        print(
            "note: no usable GPU here (CuPy or a CUDA device missing): running on the host instead",
            file=notes,
        )
    if not on_gpu and args.repeats is not None:
        print(
            f"note: --repeats {args.repeats} times GPU runs; the host run checks correctness once", file=notes
        )
    expected = None
    if args.reference:  # beside the kernels: NumPy on one core while the C++ compiler or the kernels run

        def checked_by_reference():
            with step("the NumPy reference"):
                # with --fuse, of the program in the file: the plan's rewrite is checked too
                return reference(getattr(args, "written_program", None) or program, **inputs)

        expected = _in_background(checked_by_reference)
    if on_gpu:
        with step("the kernels on the GPU"):
            outputs = kernel(**inputs)
    else:
        start = time.perf_counter()
        with step("the kernels on the host (C++ emulation of the CUDA source)"):
            outputs = kernel.run_host(**inputs)
        seconds = time.perf_counter() - start
    if expected is not None:
        want = expected()
        compared = [compare_output(d.name, d.dtype, outputs[d.name], want[d.name]) for d in program.outputs]
    else:
        compared = [_unchecked(d.name) for d in program.outputs]
    ok = all(c["ok"] for c in compared if c["checked"])
    if on_gpu:
        timing = kernel.time(repeat=args.repeats or 10, **inputs)
        ran = {
            "on": "gpu",
            "device": _gpu_name(),
            "median_s": statistics.median(timing.samples_s),
            "samples": len(timing.samples_s),
            "runs_per_sample": timing.runs_per_sample,
            "method": timing.method,
        }
        ran_text = (
            f"ran on GPU {ran['device']}: median {ran['median_s'] * 1e6:.3g} us per run over "
            f"{len(timing.samples_s)} samples of {timing.runs_per_sample} runs ({timing.method}, kernel.time)"
        )
    else:
        ran = {"on": "host", "seconds": seconds}
        ran_text = f"ran on the host (C++ emulation of the CUDA source): {seconds:.2f} s"
    if args.json:
        import json

        # a fused program's sizes are numbers in it: the plan's
        planned = dict(kernel.mapping.fusion.sizes) if kernel.mapping.fusion is not None else {}
        document = {
            "mapping": kernel.mapping.to_json(),
            "seed": args.seed,
            "sizes": sizes or planned,
            "sizes_asked": asked or planned,
            "outputs": [{k: v for k, v in c.items() if k != "text"} for c in compared],
            "ok": ok if args.reference else None,
            "ran": ran,
        }
        print(json.dumps(document, indent=2, allow_nan=False))
        return 0 if ok else 1
    for c in compared:
        print(c["text"])
    print(ran_text)
    if not on_gpu:
        what = "checks correctness only" if args.reference else "checked nothing here (--no-reference)"
        print(f"note: the host run {what}; its time (C++ build included) is not GPU performance")
    if not ok:
        print("MISMATCH")
        return 1
    return 0


def _bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from polymap.bench import bench_solver, solver_json, solver_markdown
    from polymap.errors import ArgumentError

    if args.plan:
        if args.kernels or args.models or args.plot is not None or args.json:
            raise ArgumentError(
                "bench --plan runs its own cases: not with --kernels, models, --plot or --json"
            )
        return _bench_plan(args)
    if args.kernels:
        return _bench_kernels(args)
    models = [Path(m) for m in args.models] or sorted(Path("models").glob("*.te"))
    if not models:
        print("error: no models given and no models/*.te here", file=sys.stderr)
        return 1
    if args.plot is not None:
        from polymap.plot import checked_plot_path

        checked_plot_path(args.plot)
    runs = bench_solver(
        models, target=args.target, repeats=args.repeats, time_limit=args.time_limit, echo=not args.json
    )
    command = "polymap " + " ".join(sys.argv[1:])
    if args.json:
        import json

        text = json.dumps(solver_json(runs, target=args.target, command=command), indent=2, allow_nan=False)
    else:
        text = solver_markdown(runs, target=args.target, command=command)
    if args.output:
        _write(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text)
    if args.plot is not None:  # after the results: a picture that fails loses nothing
        from polymap.plot import plot_roofline

        sys.stdout.flush()
        drawn = plot_roofline([(run.model, run.mapping) for run in runs], args.plot)
        print(f"drew the roofline into {drawn}", file=sys.stderr)
    return 0


def _bench_plan(args: argparse.Namespace) -> int:
    from pathlib import Path

    from polymap.bench import machine
    from polymap.plan import bench

    if not Path("models").is_dir():
        print("error: run from the polymap checkout (models/ not found)", file=sys.stderr)
        return 1

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    runs = bench.run(Path("."), time_limit_s=args.time_limit, say=say)
    text = bench.markdown(runs, command="polymap " + " ".join(sys.argv[1:]), machine=machine())
    if args.output:
        _write(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def _bench_kernels(args: argparse.Namespace) -> int:
    from pathlib import Path

    from polymap.bench import machine
    from polymap.bench_kernels import (
        CASES,
        Options,
        kernels_json,
        kernels_markdown,
        model_case,
        run_gpu_cases,
        run_host_cases,
    )
    from polymap.errors import ArgumentError
    from polymap.runtime.gpu import gpu_available

    root = Path(".")
    if args.models:  # the named models, each next to a copy of its compulsory bytes
        missing = [m for m in args.models if not Path(m).is_file()]
        if missing:
            raise ArgumentError(f"bench --kernels: no such model file: {', '.join(missing)}")
        from polymap.ir.parse import load

        for m in args.models:  # bench times models at their default sizes: each needs one
            program = load(Path(m))
            missing = [q.name for q in program.params if q.default is None]
            if missing:
                raise ArgumentError(
                    f"bench --kernels: {m}: size {', '.join(missing)} has no default "
                    f"(write 'param {missing[0]} = <size>'); models are timed at their default sizes"
                )
            if not program.outputs:
                raise ArgumentError(f"bench --kernels: {m}: the program has no out or inout buffer to check")
        cases = tuple(model_case(Path(m)) for m in args.models)
    elif not (root / "models").is_dir():
        print("error: run from the polymap checkout (models/ not found)", file=sys.stderr)
        return 1
    else:
        cases = CASES
    if args.output and (Path(args.output).is_dir() or not Path(args.output).parent.is_dir()):
        # said before the cases run (minutes on a GPU), not after
        raise ArgumentError(f"cannot write {args.output}: not a file in an existing folder")
    if args.plot is not None:
        from polymap.plot import checked_plot_path

        checked_plot_path(args.plot)  # before the cases: a bad path costs nothing
    on_gpu = gpu_available() and not args.host
    options = Options(target=args.target, time_limit=args.time_limit)
    # progress on stdout, or stderr with --json (stdout is then the JSON document alone); none with -q
    stream = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=stream, flush=True)

    if on_gpu:
        import cupy

        results = run_gpu_cases(root, cases, options=options, say=say)
        device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    else:
        say("no GPU (or --host): correctness on the host only; GPU figures pending")
        results = run_host_cases(root, cases, options=options, say=say)
        device = "none (host run)"
    command = "polymap " + " ".join(sys.argv[1:])
    if args.json:
        import json

        text = json.dumps(
            kernels_json(results, device=device, command=command, machine=machine()),
            indent=2,
            allow_nan=False,
        )
    else:
        text = kernels_markdown(results, device=device, command=command, machine=machine())
    if args.output:
        _write(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text)
    if args.plot is not None:  # after the record: a picture that fails loses nothing
        from polymap.plot import plot_bench_roofline
        from polymap.targets import get_target

        sys.stdout.flush()
        drawn = plot_bench_roofline(results, get_target(args.target), device, args.plot)
        print(f"drew the roofline into {drawn}", file=sys.stderr)
    wrong = [r.case for r in results if not r.ok]
    if wrong:  # a record is written either way; the exit status says a kernel was wrong
        print(f"MISMATCH against the reference: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with contextlib.nullcontext() if args.quiet else reporting():
            return _command(args)
    except PolymapError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader left (`polymap map ... | head`): not an error of ours; point stdout at
        # /dev/null so that Python's flush at exit does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _command(args: argparse.Namespace) -> int:
    commands = {
        "check": _check,
        "map": _map,
        "emit": _emit,
        "run": _run,
        "inspect": _inspect,
        "plan": _plan,
        "frontier": _frontier,
        "bench": _bench,
    }
    return commands[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
