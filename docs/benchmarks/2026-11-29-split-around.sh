#!/bin/bash
# Reduction loops with statements around them in their band, mapped by polymap: the
# predicted time and the split line of each. Run from a checkout:
#   bash docs/benchmarks/2026-11-29-split-around.sh
set -euo pipefail
dir=$(mktemp -d)
cat > "$dir/gemm_init.te" <<'TE'
param M = 64
param N = 64
param K = 65536
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i {
  par N j {
    C[i, j] = 0
    seq K k {
      C[i, j] += A[i, k] * B[k, j]
    }
  }
}
TE
cat > "$dir/gemm_bias_relu_local.te" <<'TE'
param M = 64
param N = 64
param K = 65536
in  A: f32[M, K]
in  B: f32[K, N]
in  bias: f32[N]
out C: f32[M, N]
par M i {
  par N j {
    new acc: f32
    acc = bias[j]
    seq K k {
      acc += A[i, k] * B[k, j]
    }
    C[i, j] = max(acc, 0)
  }
}
TE
cat > "$dir/column_sum_init.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
out c: f32[N]
par N j {
  c[j] = 0
  seq M i {
    c[j] += X[i, j]
  }
}
TE
cat > "$dir/column_max_start.te" <<'TE'
param M = 16384
param N = 4096
in  X: f32[M, N]
out c: f32[N]
par N j {
  c[j] = X[0, j]
  seq M i {
    c[j] max= X[i, j]
  }
}
TE
for f in gemm_init gemm_bias_relu_local column_sum_init column_max_start; do
  echo "== $f"
  polymap map "$dir/$f.te" 2>/dev/null | grep -E "^kernel|GPU filled|split into|^predicted time" || true
done
rm -rf "$dir"
