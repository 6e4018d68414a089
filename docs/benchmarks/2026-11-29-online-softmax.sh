#!/bin/bash
# The row softmax in its three forms (three passes over the row, the row kept on chip, the
# online form: maximum and sum in one pass), mapped by polymap at the models' sizes and at
# rows of 32768 (too long for the on-chip form's 512); then the online form with its
# reduction pinned to one thread per row (what it mapped to before online sums were
# recognized), and the machine code of the online kernel for sm_90. Predictions of the
# cost model, not timings. Run from a checkout:
#   bash docs/benchmarks/2026-11-29-online-softmax.sh
set -euo pipefail
for model in softmax_rows softmax_rows_onchip softmax_rows_online; do
  echo "== $model (49152 x 512)"
  polymap map "models/$model.te" | grep -E "per point|loop 'j'|flops|SCIP optimal"
done
for model in softmax_rows softmax_rows_online; do
  echo "== $model (4096 x 32768)"
  polymap map "models/$model.te" --size M=4096 --size N=32768 | grep -E "per point|loop 'j'|flops|SCIP optimal"
done
echo "== softmax_rows_online, i.lanes=1 (a thread per row, as before)"
polymap map models/softmax_rows_online.te --pin i.lanes=1 | grep -E "flops|SCIP optimal"
echo "== softmax_rows_online, machine code (NVRTC, sm_90)"
polymap inspect models/softmax_rows_online.te
