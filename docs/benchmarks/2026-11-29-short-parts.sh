#!/bin/bash
# Reductions whose split into parts of at least 256 iterations leaves the GPU under-filled,
# and the reductions of docs/mapping.md's split section, mapped by polymap: the predicted
# time and the split lines of each. Run from a checkout:
#   bash docs/benchmarks/2026-11-29-short-parts.sh
set -euo pipefail
dir=$(mktemp -d)
cat > "$dir/batch_sum.te" <<'TE'
param B = 4096
param N = 64
param D = 64
in  X: f32[B, N, D]
out s: f32[N, D]
par N j { par D d { s[j, d] = 0
  seq B b { s[j, d] += X[b, j, d] } } }
TE
cat > "$dir/full_sum.te" <<'TE'
param N = 67108864
in  X: f32[N]
out s: f32[1]
s[0] = 0
seq N i { s[0] += X[i] }
TE
cat > "$dir/column_sum.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
inout c: f32[N]
par N j { seq M i { c[j] += X[i, j] } }
TE
cat > "$dir/column_sum_init.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
out c: f32[N]
par N j { c[j] = 0
  seq M i { c[j] += X[i, j] } }
TE
cat > "$dir/skinny_gemm.te" <<'TE'
param M = 64
param N = 64
param K = 65536
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i { par N j { C[i, j] = 0
  seq K k { C[i, j] += A[i, k] * B[k, j] } } }
TE
for f in batch_sum full_sum column_sum column_sum_init skinny_gemm; do
  echo "== $f"
  polymap map "$dir/$f.te" 2>/dev/null | grep -E "^kernel|GPU filled|split into|^predicted time" || true
done
rm -rf "$dir"
