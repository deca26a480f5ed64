#!/usr/bin/env bash
# Tasks from PyTorch modules on the H200 (device tool): each example module as a CUDA bf16 task with a first
# kernel, checked against PyTorch eager (`torch`) and torch.compile (`compile`) in one run each.
#   bash experiments/module_tasks/device_check.sh      # the table last; $OUT: summary.txt and checks.tar.gz (every
#                                                      # log and JSON report, packed after each check: the device
#                                                      # tool returns at most 8 files)
# KERNELS (optional): "task:file.cu ..." pairs; by default every example with a CUDA kernel.
set -u
mkdir -p /tmp/site && tar xJf .carry/pydeps.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD
LOGS=/tmp/module_checks
rm -rf "$LOGS" && mkdir -p "$LOGS"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$LOGS/pip.log" 2>&1
export LITELLM_LOCAL_MODEL_COST_MAP=True COLUMNS=250
date -u +"start %Y-%m-%d %H:%M UTC" > "$OUT/summary.txt"
rm -rf /tmp/module_tasks && mkdir -p /tmp/module_tasks
KERNELS=${KERNELS:-"row-softmax:row_softmax.cu layernorm:layernorm.cu linear-bias-gelu:linear_bias_gelu.cu
  linear-bias-gelu:linear_bias_gelu_wmma.cu linear-residual-rmsnorm:linear_residual_rmsnorm.cu
  embedding-gather:embedding_gather.cu"}
for pair in $KERNELS; do
  name=${pair%%:*}; kernel=examples/modules/${pair#*:}; label=$(basename "$kernel" .cu)
  dir=/tmp/module_tasks/$name
  if [ ! -d "$dir" ]; then  # the task, with the first kernel named for it as its original
    timeout 120 evokernel task new "$name" --from-module "examples/modules/${name//-/_}.py" --seed-kernel "$kernel" \
      --language cuda -o "$dir" > "$LOGS/$name.new.log" 2>&1
    echo "$name task new rc $?" >> "$OUT/summary.txt"
  fi
  timeout 300 evokernel check "$kernel" --task "$dir" --scenarios scaled --original compile --baselines \
    --json "$LOGS/$label.json" > "$LOGS/$label.check.log" 2>&1
  echo "$label check rc $?: $(grep -i 'geomean\|rejected\|^error' "$LOGS/$label.check.log" | head -2 | tr '\n' ' ')" \
    >> "$OUT/summary.txt"
  tar czf "$OUT/checks.tar.gz" -C "$LOGS" .
done
python3 experiments/module_tasks/table.py "$LOGS"/*.json >> "$OUT/summary.txt" 2>&1
date -u +"end %Y-%m-%d %H:%M UTC" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
