#!/bin/bash
# Row reductions over few long rows (a softmax over a vocabulary: 16 rows of 131072, and 64
# of 32768), where a block per row leaves most of the GPU empty: the online softmax, the
# three-pass softmax and the layer norm, mapped by polymap, with the split choice's line per
# reduction loop; then every model at its own sizes (the total predicted time of each, to
# show what did not change). Predictions of the cost model, not timings. Run from a
# checkout, once per commit compared:
#   bash docs/benchmarks/2026-11-29-online-splits.sh > out.txt
set -uo pipefail
for size in "16 131072" "64 32768"; do
  set -- $size
  for model in softmax_rows_online softmax_rows layernorm; do
    echo "== $model (M = $1, N = $2)"
    polymap map "models/$model.te" --size "M=$1" --size "N=$2" 2>&1 \
      | grep -E "^kernel|GPU filled|^reduction|^predicted time" | grep -v "^key:" | sed -E 's/(GPU filled [0-9.]+%) .*-> (predicted [^ ]+ [a-z]+).*/\1 -> \2/'
  done
done
echo "== every model at its own sizes"
for f in models/*.te; do
  printf '%s: ' "$(basename "$f" .te)"
  polymap map "$f" 2>&1 | grep -E "^predicted time" || echo "(no total)"
done
echo "== a column softmax in the online form (4096 x 8192: a reduction along the non-contiguous dimension)"
column=$(mktemp --suffix=.te)
cat > "$column" <<'TE'
param M = 4096
param N = 8192
in  X: f32[M, N]
out Y: f32[M, N]
par N j {
  new mx: f32
  new sum: f32
  mx = X[0, j]
  sum = 0
  seq M i {
    new top: f32
    top = max(mx, X[i, j])
    sum = sum * exp(mx - top) + exp(X[i, j] - top)
    mx = top
  }
  par M i {
    Y[i, j] = exp(X[i, j] - mx) / sum
  }
}
TE
polymap map "$column" 2>&1 | grep -E "^kernel|GPU filled|^reduction|^predicted time" | grep -v "^key:" \
  | sed -E 's/(GPU filled [0-9.]+%) .*-> (predicted [^ ]+ [a-z]+).*/\1 -> \2/'
rm -f "$column"
