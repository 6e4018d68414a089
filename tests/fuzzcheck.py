"""The end-to-end check of generated programs, run in worker processes so that a hang or a
crash (SIGFPE, SIGSEGV, SIGBUS, abort) of one program is counted instead of ending the run.

One program (``check_case``): parse and analyze it (a rejection is the generator's fault,
counted apart as "rejected"); run it with ``tests/oracle.py`` (a naive scalar interpreter
sharing no code with ``polymap.reference``) and with ``polymap.reference``, which must agree;
``polymap.compile`` it with a SCIP time limit; ``Kernel.run_host`` on the same inputs, compared
with the reference (i32 exactly; floats within a relative 1e-4 of the output's scale: the
kernel keeps each reduction's order, so only rounding of contracted or reassociated
arithmetic differs); and on a sample, ``Kernel.ptx()`` through NVRTC.

Outcomes: ok, rejected, clean error (a PolymapError other than InternalError), internal
error (InternalError or any other exception escaping polymap), wrong result, hang (past the
per-program wall limit), crash (the worker died).

Command line: ``python tests/fuzzcheck.py --show SEED`` prints a program;
``python tests/fuzzcheck.py --run FIRST COUNT [--jobs J]`` runs a campaign and appends its
record to ``docs/benchmarks/DATE-fuzz-pipeline.md`` (``$POLYMAP_FUZZ_RECORD`` overrides the path).
"""

from __future__ import annotations

import argparse
import datetime
import math
import multiprocessing
import multiprocessing.connection
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzzgen import FuzzCase, generate, mutate

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "docs" / "benchmarks"
OUTCOMES = ("ok", "clean error", "internal error", "wrong result", "hang", "crash", "rejected")
FAILURES = ("internal error", "wrong result", "hang", "crash")
MAX_ELEMENTS = 1 << 24  # the oracle is scalar Python and the inputs are made in memory


@dataclass(frozen=True, slots=True)
class Result:
    """What happened to one program: ``stage`` is where (analyze, oracle, reference, compile,
    run, compare, ptx, worker), ``kind`` the error type or the mismatching buffer."""

    seed: int
    outcome: str
    stage: str = ""
    kind: str = ""
    detail: str = ""

    @property
    def failure_class(self) -> str:
        return f"{self.outcome} / {self.stage} / {self.kind}"


def case_program(case: FuzzCase):
    """(the program to compile, the program bound to the run sizes, the context)."""
    from polymap import parse

    program = parse(case.text, name=case.name)
    bound = program.bind(**dict(case.sizes))
    compiled = bound if case.mode == "bind" else program
    return compiled, bound, case.context if case.mode == "symbolic" else None


def make_inputs(bound, seed: int) -> dict:
    import numpy as np

    from polymap.runtime.arguments import _indexed_extents

    rng = np.random.default_rng(seed)
    inputs = {}
    indexed = _indexed_extents(bound)  # index buffers of gathers: values inside the dimension
    for decl in bound.inputs:
        shape = tuple(e.value for e in decl.shape)
        if decl.dtype.is_float:
            inputs[decl.name] = rng.standard_normal(shape).astype(decl.dtype.numpy)
        elif decl.name in indexed:
            high = min(indexed[decl.name], np.iinfo(decl.dtype.numpy).max + 1)
            inputs[decl.name] = rng.integers(0, max(high, 1), shape).astype(decl.dtype.numpy)
        else:
            inputs[decl.name] = rng.integers(-4, 6, shape).astype(decl.dtype.numpy)
    return inputs


def libm_dependent(program) -> set[str]:
    """The buffers whose values pass through ``tanh`` or ``exp``, directly or through
    another such buffer. Neither function is correctly rounded, in numpy or in the C
    library, so an i32 store of such a value truncates a number within an ulp of an integer
    either way (seed 1256: tanh(10) is 0.99999999 in one and 1.0 in the other)."""
    from polymap.ir.nodes import Assign, Read
    from polymap.ir.walk import statements

    found: set[str] = set()
    assigns = [ctx.stmt for ctx in statements(program) if isinstance(ctx.stmt, Assign)]
    while True:
        more = {
            a.target.buffer
            for a in assigns
            if _has_call(a.value) or any(isinstance(r, Read) and r.buffer in found for r in _reads(a.value))
        }
        if more <= found:
            return found
        found |= more


def _has_call(expr) -> bool:
    from polymap.ir.nodes import Binary, Call, Fn, Neg, Select

    if isinstance(expr, Call):
        rounded = (Fn.TANH, Fn.EXP, Fn.SIN, Fn.COS, Fn.SIGMOID, Fn.ERF, Fn.POW)  # libm's and NumPy's
        return expr.fn in rounded or any(_has_call(a) for a in expr.args)
    if isinstance(expr, Select):
        return any(_has_call(e) for e in (expr.then, expr.otherwise))
    if isinstance(expr, Binary):
        return _has_call(expr.lhs) or _has_call(expr.rhs)
    if isinstance(expr, Neg):
        return _has_call(expr.operand)
    return False


def _reads(expr):
    from polymap.ir.nodes import reads_of

    return reads_of(expr)


def mismatch(got: dict, want: dict, *, off_by_one: set[str] = frozenset()) -> str | None:
    """None when equal (integers and bool exactly, or within 1 for the buffers of
    ``off_by_one``; floats within 1e-4 of the scale, f16 and bf16 within two units of
    theirs), else which buffer and how."""
    import numpy as np

    if set(got) != set(want):
        return f"outputs {sorted(got)} != {sorted(want)}"
    for name in sorted(want):
        a, b = np.asarray(got[name]), np.asarray(want[name])
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{name}: {a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}"
        if b.dtype.kind in "iub":
            bad = np.abs(a.astype(np.int64) - b.astype(np.int64)) > (1 if name in off_by_one else 0)
        else:
            # the 16-bit floats round an f32 value: one unit of theirs (2**-10, 2**-7) apart
            tolerance = {"float16": 2.0**-9, "bfloat16": 2.0**-6}.get(b.dtype.name, 1e-4)
            with np.errstate(invalid="ignore"):
                a, b = a.astype(np.float64), b.astype(np.float64)
            finite = np.isfinite(b)
            scale = max(1.0, float(np.abs(b[finite]).max())) if finite.any() else 1.0
            with np.errstate(invalid="ignore"):
                bad = ~((np.abs(a - b) <= tolerance * scale) | (np.isnan(a) & np.isnan(b)) | (a == b))
        if bad.any():
            first = tuple(int(x) for x in np.argwhere(bad)[0])
            where = f"first at {list(first)}: {a[first]} vs {b[first]}"
            return f"{name}: {int(bad.sum())} of {b.size} elements differ, {where}"
    return None


def _classify(seed: int, stage: str, err: BaseException) -> Result:
    from polymap.errors import InternalError, PolymapError

    text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    if isinstance(err, PolymapError) and not isinstance(err, InternalError):
        return Result(seed, "clean error", stage, type(err).__name__, text)
    tb = traceback.format_exception(err)[-3:]
    return Result(seed, "internal error", stage, type(err).__name__, text + "\n" + "".join(tb)[-600:])


def check_case(case: FuzzCase, *, time_limit: float = 10.0, ptx: bool = False) -> Result:
    """Run one generated program end to end (in this process) and classify the outcome."""
    from oracle import run_oracle

    import polymap
    from polymap.errors import ArgumentError, InfeasibleMappingError, PolymapError
    from polymap.ir.nodes import BufferKind
    from polymap.reference import reference

    seed = case.seed
    try:
        compiled, bound, context = case_program(case)
        polymap.analyze(compiled, context=context)
    except PolymapError as err:
        return Result(seed, "rejected", "analyze", type(err).__name__, str(err)[:300])
    elements = sum(
        math.prod(e.value for e in d.shape) for d in bound.all_buffers() if d.kind is not BufferKind.NEW
    )
    if elements > MAX_ELEMENTS:  # the generator's fault (a 3-d read at N = 4096), not polymap's
        return Result(seed, "rejected", "size", "too large", f"{elements} elements in the buffers")
    inputs = make_inputs(bound, seed)
    try:
        want = reference(bound, **inputs)
    except Exception as err:  # noqa: BLE001 - every escape is classified
        return _classify(seed, "reference", err)
    try:
        oracle, _ = run_oracle(bound, inputs)
    except Exception as err:  # noqa: BLE001
        return Result(seed, "wrong result", "oracle", type(err).__name__, str(err)[:300])
    loose = libm_dependent(bound)
    if (why := mismatch(want, oracle, off_by_one=loose)) is not None:
        return Result(seed, "wrong result", "reference", why.split(":")[0], "reference vs oracle: " + why)
    try:
        kernel = polymap.compile(compiled, context=context, time_limit=time_limit)
    except Exception as err:  # noqa: BLE001
        return _classify(seed, "compile", err)
    try:
        got = kernel.run_host(**inputs)
    except Exception as err:  # noqa: BLE001
        return _classify(seed, "run", err)
    if (why := mismatch(got, want, off_by_one=loose)) is not None:
        staged = any(k.staging is not None for k in kernel.mapping.kernels)
        laned = any(k.lanes > 1 for k in kernel.mapping.kernels)
        return Result(
            seed, "wrong result", "run", "lanes" if laned else "staged" if staged else "unstaged", why
        )
    # every kernel that could give a warp to each point and was not given one, pinned to it:
    # the lanes' code runs on every program that has a loop to spread, not only where SCIP
    # finds them faster
    pins = _lane_pins(kernel.mapping)
    if pins:
        try:
            laned = polymap.compile(compiled, context=context, time_limit=time_limit, pins=pins)
            got = laned.run_host(**inputs)
        except Exception as err:  # noqa: BLE001
            return _classify(seed, "lanes", err)
        if (why := mismatch(got, want, off_by_one=loose)) is not None:
            return Result(seed, "wrong result", "run", "lanes pinned", why)
    # the x loops of the mapping, their points pinned into groups (``space.py``): SCIP takes
    # groups on few programs (register-tiled GEMMs), so their code runs on every program
    # whose x loop is long enough for 4 points of 32 threads; a pin no mapping meets (or
    # that names a loop which is a seq loop in another kernel) is skipped
    pins = _group_pins(kernel.mapping)
    if pins:
        try:
            grouped = polymap.compile(compiled, context=context, time_limit=time_limit, pins=pins)
        except (InfeasibleMappingError, ArgumentError):
            grouped = None  # no mapping meets it, or a loop of that name is a seq loop elsewhere
        except Exception as err:  # noqa: BLE001
            return _classify(seed, "groups", err)
        if grouped is not None:
            try:
                got = grouped.run_host(**inputs)
            except Exception as err:  # noqa: BLE001
                return _classify(seed, "groups", err)
            if (why := mismatch(got, want, off_by_one=loose)) is not None:
                return Result(seed, "wrong result", "run", "groups pinned", why)
    if ptx:
        try:
            kernel.ptx()
        except Exception as err:  # noqa: BLE001
            return _classify(seed, "ptx", err)
    return Result(seed, "ok")


def _group_pins(mapping) -> dict:
    """Pins asking for grouped points on every x loop of the mapping that runs 128
    iterations or more (room for 32 threads of 4 points), by loop name."""
    from polymap.mapping.space import Axis

    return {
        lm.index: {"distribution": "grouped"}
        for km in mapping.kernels
        if km.lanes == 1
        for lm in km.loops
        if lm.thread_axis is Axis.X and lm.max_extent >= 128
    }


def _lane_pins(mapping) -> dict:
    """Pins giving a warp per point to every kernel of the mapping that has a loop to spread
    (``polymap.mapping.lanes``) and a thread per point."""
    from polymap.mapping.lanes import spread_loops
    from polymap.mapping.space import kernels
    from polymap.poly.model import analyze

    if all(k.lanes > 1 or not k.loops for k in mapping.kernels):
        return {}
    model = analyze(mapping.program, context=mapping.context)
    pins = {}
    for kernel, km in zip(kernels(mapping.program), mapping.kernels):
        if km.lanes == 1 and spread_loops(kernel, model):
            pins[f"{kernel.name}.{kernel.indices[0]}"] = {"lanes": 32}
    return pins


# ------------------------------------------------------------------ worker processes


def _worker(conn, cache_dir: str | None, time_limit: float, ptx_every: int, check) -> None:
    if cache_dir:
        os.environ["POLYMAP_CACHE_DIR"] = cache_dir
    import polymap  # noqa: F401 - import once, before the first deadline starts

    conn.send("ready")
    while True:
        seed = conn.recv()
        if seed is None:
            return
        case = generate(seed)
        result = check(case, time_limit=time_limit, ptx=ptx_every > 0 and seed % ptx_every == 0)
        conn.send(result)


@dataclass(slots=True)
class Campaign:
    """Counts per outcome and every non-ok, non-clean result."""

    counts: Counter = field(default_factory=Counter)
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def tried(self) -> int:
        return sum(self.counts.values())

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.outcome in FAILURES]

    def classes(self) -> dict[str, list[int]]:
        """Each distinct failure class with the seeds that show it."""
        out: dict[str, list[int]] = {}
        for r in self.results:
            if r.outcome in FAILURES or r.outcome in ("clean error", "rejected"):
                out.setdefault(r.failure_class, []).append(r.seed)
        return out


class _Slot:
    def __init__(self, ctx, cache_dir, time_limit, ptx_every, check) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker, args=(child, cache_dir, time_limit, ptx_every, check), daemon=True
        )
        self.process.start()
        child.close()
        self.ready = False
        self.seed: int | None = None
        self.started = 0.0

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()  # our own child, by its handle
        self.process.join()
        self.conn.close()


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def run_campaign(
    seeds,
    *,
    jobs: int = 1,
    timeout: float = 60.0,
    time_limit: float = 10.0,
    ptx_every: int = 10,
    cache_dir: str | None = None,
    budget: float | None = None,
    progress=None,
    check=check_case,
) -> Campaign:
    """Check every seed's program in ``jobs`` worker processes, each program within
    ``timeout`` wall seconds (after which it is a hang and its worker is replaced). With a
    ``budget`` (seconds), no new program starts after it: the campaign then covers a prefix
    of ``seeds`` (``Campaign.tried`` says how many). ``check`` (a module-level function, as
    the spawned workers import it by name) replaces ``check_case`` in tests of the harness."""
    ctx = multiprocessing.get_context("spawn")
    pending = list(seeds)[::-1]
    campaign = Campaign()
    start = time.monotonic()
    own_cache = None
    if cache_dir is None:
        own_cache = tempfile.TemporaryDirectory(prefix="polymap-fuzz-")
        cache_dir = own_cache.name
    slots = [
        _Slot(ctx, cache_dir, time_limit, ptx_every, check) for _ in range(max(1, min(jobs, len(pending))))
    ]

    def record(result: Result) -> None:
        campaign.counts[result.outcome] += 1
        if result.outcome != "ok":
            campaign.results.append(result)
        if progress is not None:
            progress(result, campaign)

    def assign(slot: _Slot) -> None:
        if budget is not None and time.monotonic() - start > budget:
            pending.clear()
        if pending:
            slot.seed, slot.started = pending.pop(), time.monotonic()
            slot.conn.send(slot.seed)
        else:
            slot.seed = None

    try:
        while True:
            busy = [s for s in slots if s.seed is not None or not s.ready]
            if not busy and not pending:
                break
            ready = multiprocessing.connection.wait([s.conn for s in busy], timeout=0.5)
            for i, slot in enumerate(slots):
                if slot.conn in ready:
                    try:
                        message = slot.conn.recv()
                    except (EOFError, OSError):
                        slot.process.join()
                        if slot.seed is not None:
                            record(Result(slot.seed, "crash", "worker", _signal_name(slot.process.exitcode)))
                        slot.stop()
                        slots[i] = slot = _Slot(ctx, cache_dir, time_limit, ptx_every, check)
                        continue
                    if message == "ready":
                        slot.ready = True
                    else:
                        record(message)
                    assign(slot)
                elif slot.seed is not None and time.monotonic() - slot.started > timeout:
                    record(Result(slot.seed, "hang", "worker", f"over {timeout:g} s"))
                    slot.stop()
                    slots[i] = _Slot(ctx, cache_dir, time_limit, ptx_every, check)
            if not pending and all(s.seed is None and s.ready for s in slots):
                break
    finally:
        for slot in slots:
            try:
                slot.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            slot.process.join(timeout=5)
            slot.stop()
        if own_cache is not None:
            own_cache.cleanup()
    campaign.seconds = time.monotonic() - start
    return campaign


# ------------------------------------------------------------------ the record


def check_mutation(seed: int) -> Result:
    """Parse and analyze a mutated program (even seeds mutate a generated program, odd ones
    a model): ok, or a PolymapError that names the file, else an internal error."""
    import polymap
    from polymap.errors import InternalError, PolymapError

    models = sorted((ROOT / "models").glob("*.te"))
    base = models[seed // 2 % len(models)].read_text() if seed % 2 else generate(seed).text
    text = mutate(base, seed)
    stage = "parse"
    try:
        program = polymap.parse(text, name="mutant", source="mutant.te")
        stage = "analyze"
        polymap.analyze(program)
    except InternalError as err:
        return _classify(seed, stage, err)
    except PolymapError as err:
        if "mutant.te" not in str(err):
            return Result(seed, "internal error", stage, f"unlocated {type(err).__name__}", str(err)[:300])
        return Result(seed, "clean error", stage, type(err).__name__)
    except Exception as err:  # noqa: BLE001 - a raw exception is the finding
        return _classify(seed, stage, err)
    return Result(seed, "ok")


def run_mutations(seeds) -> Campaign:
    """Mutated programs through parse and analyze, in this process (nothing runs natively)."""
    campaign, start = Campaign(), time.monotonic()
    for seed in seeds:
        result = check_mutation(seed)
        campaign.counts[result.outcome] += 1
        if result.outcome != "ok":
            campaign.results.append(result)
    campaign.seconds = time.monotonic() - start
    return campaign


def write_record(
    campaign: Campaign,
    *,
    first_seed: int,
    command: str,
    jobs: int,
    timeout: float,
    time_limit: float,
    path: str | Path | None = None,
    what: str = "generated programs, end to end",
) -> Path:
    """Append this campaign's counts, seeds, date and command to the markdown record
    (``$POLYMAP_FUZZ_RECORD``, else docs/benchmarks/DATE-fuzz-pipeline.md, dated like the
    other records there)."""
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    path = Path(path or os.environ.get("POLYMAP_FUZZ_RECORD") or BENCHMARKS / f"{today}-fuzz-pipeline.md")
    path.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    c = campaign.counts
    lines = []
    if not path.exists():
        lines += [
            "# End-to-end fuzzing of the pipeline (issue 14)",
            "",
            "Generated programs (`tests/fuzzgen.py`) checked end to end by `tests/fuzzcheck.py`:",
            "oracle and reference agree, `compile` then `run_host` equals the reference, NVRTC",
            "compiles a sample. A program is reproduced from its seed alone:",
            "`python tests/fuzzcheck.py --show SEED`. Mutated programs (`fuzzgen.mutate` of a generated",
            "program or a model) go through parse and analyze only: every error must be a located",
            "PolymapError. Each run appends a section.",
            "",
        ]
    lines += [
        f"## {now}: {what}",
        "",
        f"- command: `{command}`",
        f"- host: {platform.machine()}, {os.cpu_count()} cores, polymap {polymap_version()}",
        f"- seeds: {first_seed} .. {first_seed + campaign.tried - 1} ({campaign.tried} programs)",
        (
            f"- jobs: {jobs}, wall limit per program: {timeout:g} s, SCIP time limit: {time_limit:g} s, "
            f"total {campaign.seconds:.0f} s"
            if timeout > 0
            else f"- in this process (nothing compiled or run), total {campaign.seconds:.0f} s"
        ),
        "",
        "| tried | ok | clean error | internal error | wrong result | hang | crash | rejected |",
        "|---|---|---|---|---|---|---|---|",
        (
            f"| {campaign.tried} | {c['ok']} | {c['clean error']} | {c['internal error']} "
            f"| {c['wrong result']} "
            f"| {c['hang']} | {c['crash']} | {c['rejected']} |"
        ),
        "",
    ]
    classes = campaign.classes()
    if classes:
        lines += ["| class (outcome / stage / kind) | programs | seeds (first 8) |", "|---|---|---|"]
        for name, seeds in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"| {name} | {len(seeds)} | {', '.join(map(str, seeds[:8]))} |")
        lines.append("")
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")
    return path


def polymap_version() -> str:
    from polymap.version import __version__

    return __version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", type=int, help="print the program of a seed and check it here")
    parser.add_argument("--run", type=int, nargs=2, metavar=("FIRST", "COUNT"))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--budget", type=float, help="start no program after this many seconds")
    parser.add_argument("--record", help="markdown record to append to")
    args = parser.parse_args(argv)
    if args.show is not None:
        case = generate(args.show)
        print(f"# seed {case.seed}, mode {case.mode}, sizes {dict(case.sizes)}, context {case.context!r}")
        print(f"# features: {', '.join(case.features)}")
        print(case.text)
        print(check_case(case, time_limit=args.time_limit, ptx=True))
        return 0
    first, count = args.run

    def progress(result, campaign):
        if result.outcome != "ok":
            print(
                f"seed {result.seed}: {result.failure_class}: "
                f"{result.detail.splitlines()[0] if result.detail else ''}",
                flush=True,
            )
        if campaign.tried % 50 == 0:
            print(f"... {campaign.tried} tried: {dict(campaign.counts)}", flush=True)

    campaign = run_campaign(
        range(first, first + count),
        jobs=args.jobs,
        timeout=args.timeout,
        time_limit=args.time_limit,
        budget=args.budget,
        progress=progress,
    )
    command = "python tests/fuzzcheck.py " + " ".join(argv if argv is not None else sys.argv[1:])
    path = write_record(
        campaign,
        first_seed=first,
        command=command,
        jobs=args.jobs,
        timeout=args.timeout,
        time_limit=args.time_limit,
        path=args.record,
    )
    print(dict(campaign.counts), f"{campaign.seconds:.0f} s ->", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
