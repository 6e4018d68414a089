#!/bin/bash
# The models whose reductions accumulate into an out buffer that nothing wrote before:
# the register's start (the load, or 0), the access table's reads of the target, and the
# predicted time. Predictions of the cost model, not timings. Run from a checkout:
#   bash docs/benchmarks/2026-11-29-zero-starts.sh
set -euo pipefail
for model in gemv trmv_lower matmul_256x256x32 matmul_u8_dequant batched_matmul gpt3_attention orojenesis_ffn; do
  echo "== $model"
  polymap map "models/$model.te" | grep -E "_acc = |^  read (C|y|Y|O)\[|flops|^predicted time"
done
