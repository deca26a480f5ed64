#!/usr/bin/env bash
# Tasks from PyTorch modules on the H200 (device tool): each example module as a CUDA bf16 task with its first
# kernel, checked against PyTorch eager (the task's `torch` speed reference) on its scaled scenarios.
#   bash experiments/module_tasks/device_check.sh      # logs and JSON reports under $OUT
set -u
mkdir -p /tmp/site && tar xJf .carry/pydeps.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1
export LITELLM_LOCAL_MODEL_COST_MAP=True
date -u +"start %Y-%m-%d %H:%M UTC" > "$OUT/summary.txt"
rm -rf /tmp/module_tasks && mkdir -p /tmp/module_tasks
for name in row-softmax linear-bias-gelu; do
  file=${name//-/_}
  timeout 120 evokernel task new "$name" --from-module "examples/modules/$file.py" --seed-kernel "examples/modules/$file.cu" \
    --language cuda -o "/tmp/module_tasks/$name" > "$OUT/$name.new.log" 2>&1
  echo "$name task new rc $?" >> "$OUT/summary.txt"
  cp "/tmp/module_tasks/$name/"*.h "$OUT/" 2>/dev/null
  timeout 200 evokernel check "/tmp/module_tasks/$name/original.cu" --task "/tmp/module_tasks/$name" --scenarios scaled \
    --original torch --json "$OUT/$name.json" > "$OUT/$name.check.log" 2>&1
  echo "$name check rc $?" >> "$OUT/summary.txt"
  tail -8 "$OUT/$name.check.log" | head -7 >> "$OUT/summary.txt"
done
date -u +"end %Y-%m-%d %H:%M UTC" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
