#!/usr/bin/env bash
# One device call: build, check and time the Hopper seed (attention_hopper.cu) against cuDNN SDPA and
# the FA2-style seed. Logs under $OUT. Usage: bash experiments/attention_hopper/wgmma_device.sh [STEP...]
# time:SETS and check:SETS take knob overrides, several variants separated by ';' (quote the step).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
B=experiments/attention_hopper/wgmma_bench.py
K=evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
for step in "$@"; do
  case "$step" in
    check) timeout 100 python3 $B check $K 2>&1 | tee -a "$OUT/check.log" ;;
    checkknobs) timeout 200 python3 $B check $K --knob-values 2>&1 | tee -a "$OUT/check.log" ;;
    check:*) timeout 100 python3 $B check $K --set "${step#check:}" 2>&1 | tee -a "$OUT/check.log" ;;
    time) timeout 200 python3 $B time $K evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu --rounds 10 2>&1 | tee -a "$OUT/time.log" ;;
    time:*) timeout 200 python3 $B time $K --rounds 10 --set "${step#time:}" 2>&1 | tee -a "$OUT/time.log" ;;
    decode) timeout 100 python3 $B time $K evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu --grid decode --rounds 10 2>&1 | tee -a "$OUT/time.log" ;;
    time2k:*) timeout 100 python3 $B time $K --grid fa3-2k --rounds 10 --set "${step#time2k:}" 2>&1 | tee -a "$OUT/time.log" ;;
    sass) so=$(ls /tmp/evk_bench/attention_hopper-*.so | head -1); cuobjdump --dump-sass "$so" > /tmp/sass.txt;
          echo "HGMMA $(grep -c HGMMA /tmp/sass.txt) HMMA $(grep -c 'HMMA' /tmp/sass.txt) LDL $(grep -c LDL /tmp/sass.txt)" | tee -a "$OUT/check.log" ;;
  esac
done
