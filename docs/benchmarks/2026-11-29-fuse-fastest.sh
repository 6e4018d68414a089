#!/bin/bash
# `--fuse-if fastest` against the default `--fuse-if faster` on three chains: three GEMMs of
# 32 x 16 x 16 at 1K (written below), an element-wise pair of 256 x 128 at 128 elements
# (below) and models/gpt3_attention_tiny.te at 1K and 2K. Predictions of the cost model
# (H100 SXM5), not timings. Prints the report's third line (what was compared and chosen)
# and the predicted time of each run.
#   bash docs/benchmarks/2026-11-29-fuse-fastest.sh > OUT.txt
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cat > "$work/three.te" <<'TE'
param M = 32
param K = 16
in  A: f32[M, K]
in  B: f32[K, K]
in  C: f32[K, K]
in  D: f32[K, K]
new T: f32[M, K]
new U: f32[M, K]
out Y: f32[M, K]
T[m, n] = 0
T[m, n] += A[m, k] * B[k, n]
U[m, p] = 0
U[m, p] += T[m, n] * C[n, p]
Y[m, q] += U[m, p] * D[p, q]
TE
cat > "$work/pair.te" <<'TE'
param M = 256
param N = 128
in  A: f32[M, N]
in  B: f32[M, N]
in  C: f32[M, N]
new T: f32[M, N]
out Y: f32[M, N]
T[i, j] = A[i, j] * B[i, j]
Y[i, j] = T[i, j] + C[i, j]
TE
cd "$work"  # python -m puts the working directory first on sys.path: not a checkout's
for run in "three.te 1K" "pair.te 128" "$root/models/gpt3_attention_tiny.te 1K" "$root/models/gpt3_attention_tiny.te 2K"; do
  set -- $run
  for policy in faster fastest; do
    echo "== $(basename "$1") --fuse $2 --fuse-if $policy"
    python -m polymap.cli map "$1" --fuse "$2" --fuse-if "$policy" -q | sed -n '3p;/^predicted time/p'
  done
done
rm -rf "$work"
