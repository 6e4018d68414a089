#!/usr/bin/env bash
# The planner's bench (`polymap bench --plan`) at the commit before and after the objective
# change, one after the other in the same run. Run from the repository root with the
# project's virtual environment active: bash docs/benchmarks/2026-11-28-plan-objective.sh BEFORE
set -euo pipefail
before=${1:?the commit before}
rm -rf /tmp/plan-before && git worktree add -f -q /tmp/plan-before "$before"
trap 'git worktree remove --force /tmp/plan-before' EXIT
run() { (cd "$1" && PYTHONPATH="$1" python -c "import sys; from polymap.cli import main; sys.exit(main(['bench', '--plan', '-o', '$2', '-q']))"); }
run /tmp/plan-before /tmp/plan-before.md
run "$PWD" /tmp/plan-after.md
echo "## before ($before)"; grep '^|' /tmp/plan-before.md
echo "## after ($(git rev-parse --short HEAD), with the working tree)"; grep '^|' /tmp/plan-after.md
