#!/usr/bin/env bash
# The CUDA path after the protocol change, on the H200 (device tool), in two calls that fit its 600 s limit:
#   bash experiments/trusted_timing/device_check.sh imports   # what built CUDA kernels import; the Hopper seed
#                                                             # against cuDNN on the FA3 grid
#   bash experiments/trusted_timing/device_check.sh tests     # the CUDA planted-cheat, isolation, warm-worker tests
#   bash experiments/trusted_timing/device_check.sh fa3 tests # the Hopper seed against cuDNN, then the tests
# Logs under $OUT.
set -u
mkdir -p /tmp/site && tar xJf .carry/pydeps.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1
export LITELLM_LOCAL_MODEL_COST_MAP=True
date -u +"start %Y-%m-%d %H:%M UTC" > "$OUT/summary.txt"
if [ "${1:-}" = imports ]; then
timeout 200 python3 experiments/trusted_timing/cuda_imports.py experiments/attention_hopper/runs/*.tar.gz \
  > "$OUT/cuda_imports.txt" 2> "$OUT/cuda_imports.err"
echo "imports rc $?" >> "$OUT/summary.txt"
fi
if [ "${1:-}" = imports ] || [ "${1:-}" = fa3 ]; then
timeout 180 evokernel check evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu --task attention-fwd --scenarios fa3 --original cudnn \
  --json "$OUT/hopper_fa3.json" > "$OUT/fa3.log" 2>&1
echo "fa3 rc $?" >> "$OUT/summary.txt"
grep -i "geomean" "$OUT/fa3.log" | tail -2
fi
if [ "${1:-}" = tests ] || [ "${2:-}" = tests ]; then
timeout 330 python3 -m pytest -q -x tests/test_harness_cuda.py tests/test_isolation_cuda.py tests/test_warm_worker.py \
  tests/test_trusted_timing.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc $?" >> "$OUT/summary.txt"
tail -3 "$OUT/gpu_tests.log"
fi
date -u +"end %Y-%m-%d %H:%M UTC" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
