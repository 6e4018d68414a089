"""A fuzz campaign over the generated programs that hold a select scan (tests/fuzzgen.py's
"select-scan" feature: an argmax or argmin per row, which the pipeline may run as exact
passes), each checked end to end by tests/fuzzcheck.py (oracle and reference agree;
compile, then run_host equal to the reference; NVRTC on a sample).

    python docs/benchmarks/2026-11-28-fuzz-select-scans.py FIRST COUNT BUDGET_S [top-level | feature=NAME]

Takes the seeds FIRST .. FIRST + COUNT - 1 whose program has the feature (with
``top-level``: whose scan is at the top level, the argmax or argmin of a whole array, which
the pipeline may run as exact passes split into parts; with ``feature=NAME``, another
feature of tests/fuzzgen.py instead, such as ``iterated-reduction``), runs them in one worker (60 s per
program, SCIP limit 10 s) until BUDGET_S, and prints the counts and every seed that was not
ok.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from fuzzcheck import run_campaign  # noqa: E402
from fuzzgen import generate  # noqa: E402


def top_level_scan(case) -> bool:
    """A select scan's select at the top level: indented once, in a top-level seq loop."""
    return any(
        line.startswith("  ") and not line.startswith("   ") and "select(" in line
        for line in case.text.splitlines()
    )


def main() -> None:
    first, count, budget = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    option = sys.argv[4] if len(sys.argv) > 4 else ""
    top = option == "top-level"
    feature = option.removeprefix("feature=") if option.startswith("feature=") else "select-scan"
    seeds = [
        s
        for s in range(first, first + count)
        if feature in (case := generate(s)).features and (not top or top_level_scan(case))
    ]
    what = "a top-level select scan" if top else f"the feature {feature}"
    print(f"{len(seeds)} of seeds {first}..{first + count - 1} hold {what}", flush=True)

    def progress(result, campaign):
        if result.outcome != "ok":
            line = result.detail.splitlines()[0] if result.detail else ""
            print(f"seed {result.seed}: {result.failure_class}: {line}", flush=True)

    campaign = run_campaign(seeds, jobs=1, timeout=60.0, time_limit=10.0, budget=budget, progress=progress)
    print(f"tried {campaign.tried} (seeds {seeds[0]}..{seeds[campaign.tried - 1]} with the feature)")
    print(dict(campaign.counts), f"{campaign.seconds:.0f} s")


if __name__ == "__main__":
    main()
