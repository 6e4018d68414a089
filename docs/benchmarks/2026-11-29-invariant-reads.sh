#!/bin/bash
# Predictions and machine code of the dequantizing matmul, with the reads of zero[n] and
# scale[n] left in the k loop (before) and loaded once before it (after). Run from a
# checkout; the second argument picks the polymap first on PYTHONPATH. Counts of the code
# and predictions of the cost model, not timings.
#   bash docs/benchmarks/2026-11-29-invariant-reads.sh OUT.txt [PYTHONPATH]
out=$1
export PYTHONPATH=${2:-$PYTHONPATH}
model=$(cd "$(dirname "$0")/../.." && pwd)/models/matmul_u8_dequant.te
out=$(realpath "$out")
cd /tmp  # python -m puts the working directory first on sys.path: not a checkout's
{
  python -c "import polymap, os; print(os.path.dirname(polymap.__file__))"
  python -m polymap.cli map "$model" -q
  python -m polymap.cli inspect "$model" -q
} > "$out" 2>&1
