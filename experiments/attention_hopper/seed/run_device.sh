#!/bin/bash
# One device call: correctness of every knob value (product variants), then correctness + FA3-grid
# timing of the seed and named variants against torch SDPA (cuDNN, flash). Logs under $OUT.
# usage (repo root): bash experiments/attention_hopper/seed/run_device.sh [NAME=KNOB:VAL,... ...]
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/evk_out}; mkdir -p "$OUT"
S=experiments/attention_hopper/seed
V=/tmp/evk_var; rm -rf $V; mkdir -p $V
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $OUT/gpu.txt
python3 $S/variants.py product $V/prod || exit 1
KS=()
if [ -z "$SKIP_PRODUCT" ]; then
  for f in $V/prod/p*.cu; do KS+=(--kernel $f); done
  python3 benchmarks/attention_baselines.py --no-time "${KS[@]}" 2>&1 | tee $OUT/product_check.log
fi
TK=(--kernel evokernel/defaults/attention_fa2.cu)
if [ $# -gt 0 ]; then
  python3 $S/variants.py named $V/t "$@" || exit 1
  for spec in "$@"; do TK+=(--kernel $V/t/${spec%%=*}.cu); done
fi
python3 benchmarks/attention_baselines.py --grid-check --rounds ${ROUNDS:-25} "${TK[@]}" \
  --out $OUT/table.md 2>&1 | tee $OUT/timing.log
