#!/usr/bin/env bash
# The planner's bench (`polymap bench --plan`) before and after the first solution (the best
# plan without tiled links, solved first and given to the whole search), each run twice,
# alternating, in one session. Run from the repository root with the project's virtual
# environment active: bash docs/benchmarks/2026-11-29-plan-first-solution.sh BEFORE
set -euo pipefail
before=${1:?the commit before}
rm -rf /tmp/plan-before && git worktree add -f -q /tmp/plan-before "$before"
trap 'git worktree remove --force /tmp/plan-before' EXIT
run() { (cd "$1" && PYTHONPATH="$1" python -c "import sys; from polymap.cli import main; sys.exit(main(['bench', '--plan', '-o', '$2', '-q']))"); }
for round in 1 2; do
  run /tmp/plan-before /tmp/plan-before-$round.md
  run "$PWD" /tmp/plan-after-$round.md
done
for round in 1 2; do
  echo "## before ($before), run $round"; grep '^|' /tmp/plan-before-$round.md
  echo "## after ($(git rev-parse --short HEAD)), run $round"; grep '^|' /tmp/plan-after-$round.md
done
