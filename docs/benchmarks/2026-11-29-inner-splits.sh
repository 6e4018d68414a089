#!/bin/bash
# Reductions over two nested seq loops (a whole matrix's sum, a per-batch mean) and the
# column-wise reductions of the earlier records, mapped by polymap: the predicted time and
# the split lines of each. Run from a checkout:
#   bash docs/benchmarks/2026-11-29-inner-splits.sh
set -euo pipefail
dir=$(mktemp -d)
cat > "$dir/matrix_sum.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
out s: f32
s += X[i, j]
TE
cat > "$dir/matrix_max.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
out m: f32[1]
m[0] = -inf
seq M i { seq N j { m[0] max= X[i, j] } }
TE
cat > "$dir/batch_mean.te" <<'TE'
param B = 8
param M = 16384
param N = 2048
in  X: f32[B, M, N]
out s: f32[B]
par B b {
  s[b] = 0
  seq M i { seq N j { s[b] += X[b, i, j] } }
  s[b] = s[b] / (M * N)
}
TE
cat > "$dir/column_sum.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
inout c: f32[N]
par N j { seq M i { c[j] += X[i, j] } }
TE
cat > "$dir/full_sum.te" <<'TE'
param N = 67108864
in  X: f32[N]
out s: f32[1]
s[0] = 0
seq N i { s[0] += X[i] }
TE
for f in matrix_sum matrix_max batch_mean column_sum full_sum; do
  echo "== $f"
  polymap map "$dir/$f.te" 2>/dev/null | grep -E "^kernel|GPU filled|^  read|split into|^predicted time" || true
done
# one row per part, pinned: its spread loop (the part's rows) runs one iteration, so one
# lane of each warp has work; the model charged it as if the 32 lanes shared each request
echo "== matrix_sum --pin i.split=16384"
polymap map "$dir/matrix_sum.te" --pin i.split=16384 2>/dev/null | grep -E "^kernel0|GPU filled|^  read X|split into|^predicted time" | head -6 || true
rm -rf "$dir"
