#!/usr/bin/env bash
# The predictions of docs/benchmarks/2026-11-28-shared-lanes.md: polymap map on a few models, in a
# checkout of afd67b7 (git worktree add /tmp/base afd67b7) and in this one, with the venv active.
# Usage: bash docs/benchmarks/2026-11-28-shared-lanes.sh (from the repository root of /work/main)
for tree in /tmp/base "$(pwd)"; do
  echo "### tree $tree ($(git -C $tree rev-parse --short HEAD))"
  for args in "models/softmax_rows.te" "models/softmax_rows_onchip.te" "models/fc_bias_relu.te --fuse 8K" "models/gpt3_attention_tiny.te --fuse 8K" "models/orojenesis_ffn.te --fuse 8K"; do
    f=${args%% *}; rest=${args#$f}
    [ -f $tree/$f ] || { echo "\$ polymap map $args: (no such model in this tree)"; continue; }
    echo "\$ polymap map $args"
    (cd $tree && PYTHONPATH=$tree timeout 900 polymap map $f $rest 2>&1 | grep -E "^kernel|^error|predicted time|shares|warps per point|a warp per point|^planned" | cut -c1-300)
  done
done
