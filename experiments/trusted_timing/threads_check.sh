#!/usr/bin/env bash
# Whether CPU threads spinning against each other make the CUDA worker's sampled checks slow (device tool):
# the host's share of a sampled check by variant, the checks' pieces on fa3-2k with the default threads and
# with OMP_NUM_THREADS=1 (torch's OpenMP and OpenBLAS both read it), and the throughput benchmark with it.
#   bash experiments/trusted_timing/threads_check.sh        # $OUT/threads/summary.txt, logs beside it
set -u
LOGS=$OUT/threads && mkdir -p "$LOGS"
mkdir -p /tmp/site && tar xJf .carry/pydeps.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD LITELLM_LOCAL_MODEL_COST_MAP=True COLUMNS=250
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$LOGS/pip.log" 2>&1
S=$LOGS/summary.txt
date -u +"start %Y-%m-%d %H:%M:%S UTC" > "$S"
nproc >> "$S"
timeout 120 python3 benchmarks/sampled_check_host.py --repeats 40 >> "$S" 2>&1
for threads in default 1; do
  if [ "$threads" = 1 ]; then export OMP_NUM_THREADS=1; fi
  echo "check_costs, OMP_NUM_THREADS=$threads" >> "$S"
  timeout 120 python3 experiments/trusted_timing/check_costs.py --scenarios fa3-2k --repeats 9 > "$LOGS/costs_$threads.log" 2>&1
  grep "^|" "$LOGS/costs_$threads.log" >> "$S" || tail -3 "$LOGS/costs_$threads.log" >> "$S"
done
if [[ ",${STEPS:-throughput}," == *",throughput,"* ]]; then
  timeout 230 python3 benchmarks/search_throughput.py --task attention-fwd \
    --seed evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu --scenarios fa3-2k --speed-reference cudnn \
    --max-parallel 1 --faster-seed evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu \
    --evaluations 14 --slow-evaluations 0 > "$LOGS/throughput.log" 2>&1
  echo "throughput (OMP_NUM_THREADS=1) rc $?" >> "$S"
  grep -A4 "evals/min" "$LOGS/throughput.log" | head -8 >> "$S"
fi
date -u +"end %Y-%m-%d %H:%M:%S UTC" >> "$S"
cat "$S"
