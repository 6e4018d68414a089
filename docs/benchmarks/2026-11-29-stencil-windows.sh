#!/bin/bash
# Kernels whose reads re-read what neighbouring band points read (stencils, a 1-D
# convolution, a 3x3 blur and max pool) or read sectors their sibling accesses share (a
# 2x2 max pool, RGB to gray, 3 fields of 8-float records), mapped by polymap: the access table's cached
# marks, the footprint line and the predicted time of each. Predictions of the cost model,
# not timings. Run from a checkout:
#   bash docs/benchmarks/2026-11-29-stencil-windows.sh
set -euo pipefail
dir=$(mktemp -d)
cat > "$dir/stencil5.te" <<'TE'
param N = 8192
in  A: f32[N + 2, N + 2]
out B: f32[N, N]
par N i { par N j {
  B[i, j] = 0.2 * (A[i + 1, j + 1] + A[i, j + 1] + A[i + 2, j + 1] + A[i + 1, j] + A[i + 1, j + 2])
} }
TE
cat > "$dir/conv1d.te" <<'TE'
param N = 67108864
param K = 17
in  x: f32[N + K]
in  w: f32[K]
out y: f32[N]
par N i { seq K t { y[i] += x[i + t] * w[t] } }
TE
cat > "$dir/blur3x3.te" <<'TE'
param H = 8192
param W = 8192
in  X: f32[H + 2, W + 2]
in  K: f32[3, 3]
out Y: f32[H, W]
par H i { par W j { seq 3 di { seq 3 dj { Y[i, j] += K[di, dj] * X[i + di, j + dj] } } } }
TE
cat > "$dir/maxpool3x3.te" <<'TE'
param H = 8192
param W = 8192
in  X: f32[H + 2, W + 2]
out Y: f32[H, W]
par H i { par W j { Y[i, j] = X[i, j]
  seq 3 di { seq 3 dj { Y[i, j] max= X[i + di, j + dj] } } } }
TE
cat > "$dir/maxpool2x2.te" <<'TE'
param H = 8192
param W = 8192
in  X: f32[2 * H, 2 * W]
out Y: f32[H, W]
par H i { par W j { Y[i, j] = max(max(X[2 * i, 2 * j], X[2 * i, 2 * j + 1]), max(X[2 * i + 1, 2 * j], X[2 * i + 1, 2 * j + 1])) } }
TE
cat > "$dir/gray.te" <<'TE'
param N = 33554432
in  X: u8[3 * N]
out Y: f32[N]
par N i { Y[i] = 0.299 * X[3 * i] + 0.587 * X[3 * i + 1] + 0.114 * X[3 * i + 2] }
TE
cat > "$dir/particles.te" <<'TE'
param N = 16777216
in  P: f32[8 * N]
out D: f32[N]
par N i { D[i] = sqrt(P[8 * i] * P[8 * i] + P[8 * i + 1] * P[8 * i + 1] + P[8 * i + 2] * P[8 * i + 2]) }
TE
for f in stencil5 conv1d blur3x3 maxpool3x3 maxpool2x2 gray particles; do
  echo "== $f"
  polymap map "$dir/$f.te" | grep -E "^  (read|write) |L2:|flops|SCIP optimal"
done
