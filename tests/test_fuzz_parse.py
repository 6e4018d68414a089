"""A mutation fuzzer for the front end (issue 14, "keep it that way").

Every ``models/*.te`` program and every ```te / ```te-error block of the docs is mutated at
random: tokens deleted, duplicated, swapped or replaced (by keywords, other names, extreme
numbers), random characters inserted (unicode, control characters, newlines), very long
names and numbers, deep nesting of signs, parentheses, calls and loops, truncation. Each
mutant goes through ``polymap.parse`` and ``polymap.analyze``; either may refuse it, but
only with a PolymapError that is not an InternalError, and within a few seconds. A mutant
that parses must also print as text that parses back to the same program.

A fast slice runs in the default suite; ``pytest -m fuzz`` runs the long one and prints
its counts (tried, ok, clean error, internal error, other exception, slow).
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import polymap
from polymap.errors import InternalError, PolymapError

ROOT = Path(__file__).resolve().parent.parent
SLOW_S = 5.0  # "a few seconds": a mutant that takes longer is counted as slow and fails
# Parsing is linear in the text, at a few microseconds a character on a busy machine: the
# slow check is about pathological inputs, not big ones, so mutants stay below this size.
MAX_MUTANT_CHARS = 200_000
FAST_MUTANTS = 300
LONG_MUTANTS = 6000

_TOKEN = re.compile(
    r"\s+|#[^\n]*|[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|//|\+=|-=|\*=|max=|min=|.", re.DOTALL
)
_FENCE = re.compile(r"^```(te|te-error)\n(.*?)^```", re.DOTALL | re.MULTILINE)

KEYWORDS = ("param", "par", "seq", "anchor", "in", "out", "inout", "new", "max", "min", "exp", "f32", "i32")
NUMBERS = (
    "0",
    "-1",
    "2147483647",
    "2147483648",
    "4294967296",
    str(2**63 - 1),
    str(2**63),
    str(2**64),
    "1e999",
    "1e-999",
    "0.5",
    "00000",
    "1" * 50,
    "9" * 5000,
    ".5e3",
    "1.",
    "3e10",
)
CHARS = (
    "\n",
    "\t",
    "\r",
    " ",
    "\x00",
    "\x0b",
    "\x7f",
    "é",
    "∑",
    "\u200b",
    "\ufeff",
    "😀",
    "\\",
    "'",
    '"',
    "$",
    "@",
    "!",
    "?",
    "&",
    "|",
    "^",
    "~",
    "<",
    ">",
    ".",
    ",",
    ";",
    ":",
    "=",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "+",
    "-",
    "*",
    "/",
    "%",
    "#",
)


def corpus() -> list[tuple[str, str]]:
    """(where, text) of every seed program: the models and the docs' examples."""
    seeds = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "models").glob("*.te"))]
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for k, match in enumerate(_FENCE.finditer(doc.read_text())):
            seeds.append((f"{doc.relative_to(ROOT)}#{k}", match.group(2)))
    return seeds


def mutate(text: str, rng: random.Random) -> str:
    """One to three random mutations of ``text``, the result under MAX_MUTANT_CHARS."""
    tokens = _TOKEN.findall(text) or [""]
    names = sorted({t for t in tokens if re.fullmatch(r"[A-Za-z_]\w*", t)}) or ["x"]
    for _ in range(rng.randint(1, 3)):
        before = list(tokens)
        _mutate_once(tokens, names, rng)
        if sum(map(len, tokens)) > MAX_MUTANT_CHARS:
            tokens[:] = before
    return "".join(tokens)


def _mutate_once(tokens: list[str], names: list[str], rng: random.Random) -> None:
    """One mutation, in place."""
    k = rng.randrange(len(tokens))
    op = rng.randrange(13)
    if op == 0 and len(tokens) > 1:
        del tokens[k]
    elif op == 1:
        tokens.insert(k, tokens[k])
    elif op == 2:
        j = rng.randrange(len(tokens))
        tokens[k], tokens[j] = tokens[j], tokens[k]
    elif op == 3:
        tokens.insert(k, rng.choice(CHARS))
    elif op == 4:
        tokens[k] = rng.choice(KEYWORDS + tuple(names))
    elif op == 5:
        tokens[k] = rng.choice(NUMBERS)
    elif op == 6:
        tokens[k] = rng.choice(names)[:1] + "n" * rng.choice((100, 5000, 100_000))
    elif op == 7:  # deep nesting of an expression around a token
        depth = rng.choice((50, 99, 100, 101, 300, 1000))
        opener, closer = rng.choice((("(", ")"), ("-", ""), ("exp(", ")"), ("max(1, ", ")"), ("x[", "]")))
        tokens[k] = opener * depth + tokens[k] + closer * depth
    elif op == 8:  # a long sum or a deep loop nest
        if rng.random() < 0.5:
            tokens[k] = " + ".join([tokens[k]] * rng.choice((99, 100, 101, 1500)))
        else:
            depth = rng.choice((15, 16, 17, 300))
            loops = "".join(f"seq 1 q{d} {{\n" for d in range(depth))
            tokens.insert(k, "\n" + loops + "\n" + "}\n" * depth)
    elif op == 9:
        tokens.insert(k, "\n" * rng.randint(1, 3))
    elif op == 10:
        del tokens[k + 1 :]
    elif op == 11:  # many dimensions or arguments
        tokens[k] = ", ".join([tokens[k]] * rng.choice((15, 16, 17, 300)))
    else:
        tokens.insert(k, chr(rng.randrange(0x20, 0x3000)))


class _Slow(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Slow


@dataclass
class Outcome:
    kind: str  # ok, clean, internal, other, slow
    detail: str = ""


def run_one(text: str) -> Outcome:
    """Parse and analyze one mutant, classified; a mutant past SLOW_S is interrupted."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 2 * SLOW_S)
    start = time.perf_counter()
    try:
        program = polymap.parse(text)
        # The printer must give text that reads back to the same program.
        if polymap.parse(str(program), name=program.name) != program:
            raise AssertionError(f"the printed program does not parse back to itself:\n{program}")
        polymap.analyze(program)
        outcome = Outcome("ok")
    except _Slow:
        outcome = Outcome("slow", "interrupted")
    except InternalError as err:
        outcome = Outcome("internal", str(err))
    except PolymapError:
        outcome = Outcome("clean")
    except Exception as err:  # noqa: BLE001 - the point is to catch anything else
        outcome = Outcome("other", f"{type(err).__name__}: {err}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if outcome.kind != "slow" and time.perf_counter() - start > SLOW_S:
        outcome = Outcome("slow", f"{time.perf_counter() - start:.1f} s")
    return outcome


def fuzz(count: int, seed: int) -> tuple[Counter, list[tuple[str, str, Outcome]]]:
    """Run ``count`` mutants; return the counts and the failures (where, mutant, outcome)."""
    rng = random.Random(seed)
    seeds = corpus()
    counts: Counter = Counter()
    failures = []
    for _ in range(count):
        where, text = rng.choice(seeds)
        mutant = mutate(text, rng)
        outcome = run_one(mutant)
        counts["tried"] += 1
        counts[outcome.kind] += 1
        if outcome.kind in ("internal", "other", "slow"):
            failures.append((where, mutant, outcome))
    return counts, failures


def _report(counts: Counter, failures) -> str:
    keys = ("tried", "ok", "clean", "internal", "other", "slow")
    lines = [", ".join(f"{k} {counts[k]}" for k in keys)]
    for where, mutant, outcome in failures[:10]:
        lines.append(f"{outcome.kind} from {where}: {outcome.detail[:300]}\n--- mutant ---\n{mutant[:1500]}")
    return "\n".join(lines)


def test_the_corpus_is_the_models_and_the_docs_examples():
    seeds = corpus()
    assert sum(w.startswith("models/") for w, _ in seeds) == len(list((ROOT / "models").glob("*.te")))
    assert any(w.startswith("docs/") for w, _ in seeds)


def test_mutations_are_deterministic_and_change_the_text():
    rng_a, rng_b = random.Random(7), random.Random(7)
    text = corpus()[0][1]
    mutants = [mutate(text, rng_a) for _ in range(20)]
    assert mutants == [mutate(text, rng_b) for _ in range(20)]
    assert sum(m != text for m in mutants) >= 15


def test_fuzz_fast_slice_gives_only_clean_errors():
    counts, failures = fuzz(FAST_MUTANTS, seed=14)
    print(_report(counts, failures))
    assert not failures, _report(counts, failures)
    # The slice is useful only if mutants reach both outcomes.
    assert counts["ok"] > 0 and counts["clean"] > 0


@pytest.mark.fuzz
def test_fuzz_long_run_gives_only_clean_errors():
    counts, failures = fuzz(LONG_MUTANTS, seed=2026)
    print(_report(counts, failures))
    assert not failures, _report(counts, failures)
