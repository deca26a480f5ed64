#!/usr/bin/env bash
# The CUDA runner on the H200 (device tool), from a source tree given as $1 (default: the repository root):
#   bash experiments/trusted_timing/cuda_runner_check.sh [TREE] [STEPS]
# STEPS (comma-separated, default smoke,tests,fa3; TESTS= the test files, TESTS_S= their time limit): smoke = the original on `quick`; tests = the CUDA
# harness, isolation, trusted-timing and warm-worker tests; fa3 = the Hopper seed against cuDNN on `fa3`;
# throughput = benchmarks/search_throughput.py (screened copies, as in attention_hopper/RESULTS.md); events = the
# seed and cuDNN timed by CUDA events outside the harness (experiments/attention_hopper/wgmma_bench.py); best = the
# question-driven search's best child on `fa3`; allocator = the stream-ordered allocator under the runner, in this
# tree and in a copy whose runner does not set its pool up before the filters; knobs = the recorded knob search
# (experiments/attention_hopper/config.yaml, 400 s), its evaluations a minute over the whole run and in steady state;
# warm = both seeds built and checked against cuDNN first (before knobs: the earlier run's builds were cached).
# Logs under $OUT/<tree name>; the summary is printed last.
set -u
TREE=$(readlink -f "${1:-.}")
STEPS=${2:-smoke,tests,fa3}
NAME=$(basename "$TREE")
LOGS="$OUT/$NAME"
mkdir -p "$LOGS"
mkdir -p /tmp/site && tar xJf "$TREE/.carry/pydeps.tar.xz" -C /tmp/site 2>/dev/null || tar xJf .carry/pydeps.tar.xz -C /tmp/site
cd "$TREE"
export PYTHONPATH=/tmp/site:$TREE LITELLM_LOCAL_MODEL_COST_MAP=True COLUMNS=250
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$LOGS/pip.log" 2>&1
SUMMARY="$LOGS/summary.txt"
date -u +"start %Y-%m-%d %H:%M:%S UTC ($NAME: $STEPS)" > "$SUMMARY"
step() { [[ ",$STEPS," == *",$1,"* ]]; }
SEEDS=evokernel/builtin_tasks/attention_fwd/seeds
if step smoke; then
  timeout 150 evokernel check evokernel/builtin_tasks/attention_fwd/original.cu --task attention-fwd --scenarios quick \
    --baselines > "$LOGS/smoke.log" 2>&1
  echo "smoke rc $?: $(grep -i 'geomean\|rejected\|error' "$LOGS/smoke.log" | head -3 | tr '\n' ' ')" >> "$SUMMARY"
fi
if step tests; then
  timeout ${TESTS_S:-300} python3 -m pytest -q -p no:cacheprovider -k cuda \
    ${TESTS:-tests/test_trusted_timing.py tests/test_harness_cuda.py tests/test_isolation_cuda.py tests/test_warm_worker.py} \
    > "$LOGS/gpu_tests.log" 2>&1
  echo "gpu tests rc $?: $(tail -1 "$LOGS/gpu_tests.log")" >> "$SUMMARY"
  grep -E "^(FAILED|ERROR)" "$LOGS/gpu_tests.log" | cut -c1-300 >> "$SUMMARY"
fi
if step fa3; then
  timeout 200 evokernel check $SEEDS/attention_hopper.cu --task attention-fwd --scenarios fa3 --original cudnn \
    --json "$LOGS/hopper_fa3.json" > "$LOGS/fa3.log" 2>&1
  echo "fa3 rc $?: $(grep -i 'geomean' "$LOGS/fa3.log" | tail -1)" >> "$SUMMARY"
  python3 - "$LOGS/hopper_fa3.json" >> "$SUMMARY" 2>&1 <<'PY'
import json, math, sys
report = json.load(open(sys.argv[1]))
rows = [(s["name"], s["original_time_ms"], s["speedup"]) for s in report["scenarios"] if s.get("speedup")]
def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
short = [x for _, ms, x in rows if ms < 0.5]
long_ = [x for _, ms, x in rows if ms >= 0.5]
print(f"fa3: geomean {report['geomean_speedup']:.4f}; reference under 0.5 ms: {gm(short):.4f} ({len(short)}), "
      f"longer: {gm(long_):.4f} ({len(long_)}); worst {min(x for _, _, x in rows):.3f}")
print("phases: " + ", ".join(f"{k} {v:.1f}" for k, v in report["phase_seconds"].items()))
PY
fi
if step best; then  # the question-driven search's best child (attention_hopper/RESULTS.md: 1.087 by events)
  timeout 200 evokernel check experiments/attention_hopper/question_search/best_kernel_46.cu --task attention-fwd \
    --scenarios fa3 --original cudnn --json "$LOGS/best_fa3.json" > "$LOGS/best.log" 2>&1
  echo "best rc $?: $(grep -i 'geomean' "$LOGS/best.log" | tail -1)" >> "$SUMMARY"
fi
if step events; then  # an independent timing: the seed and cuDNN by CUDA events in one process (no harness)
  timeout 200 python3 experiments/attention_hopper/wgmma_bench.py time $SEEDS/attention_hopper.cu --rounds 15 \
    > "$LOGS/events.log" 2>&1
  echo "events rc $?: $(grep 'geomean vs cuDNN' "$LOGS/events.log" | head -1)" >> "$SUMMARY"
fi
if step throughput; then
  timeout 200 python3 benchmarks/search_throughput.py --task attention-fwd --seed $SEEDS/attention_fa2.cu \
    --scenarios fa3-2k --speed-reference cudnn --max-parallel 1 --faster-seed $SEEDS/attention_hopper.cu \
    --evaluations 14 --slow-evaluations 0 --runs-dir "$LOGS/bench_runs" --results "$LOGS/throughput.md" \
    > "$LOGS/throughput.log" 2>&1
  echo "throughput rc $?" >> "$SUMMARY"
  grep "^|" "$LOGS/throughput.md" >> "$SUMMARY"
fi
if step allocator; then
  ALLOC="workspace_from_the_stream_ordered_allocator or call_the_runtime_refused"
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_harness_cuda.py -k "$ALLOC" > "$LOGS/allocator.log" 2>&1
  echo "allocator rc $?: $(tail -1 "$LOGS/allocator.log")" >> "$SUMMARY"
  rm -rf /tmp/unwarmed && mkdir /tmp/unwarmed && tar cf - --exclude=./experiments/attention_hopper/qruns . | tar xf - -C /tmp/unwarmed
  sed -i 's/ready == cudaSuccess && warm_pool(stream) != cudaSuccess/0/' /tmp/unwarmed/evokernel/harness/runner.c
  (cd /tmp/unwarmed && PYTHONPATH=/tmp/site:/tmp/unwarmed timeout 150 python3 -m pytest -q -p no:cacheprovider \
    tests/test_harness_cuda.py -k "$ALLOC" > "$LOGS/allocator_unwarmed.log" 2>&1)
  echo "allocator without the pool set up first rc $?: $(tail -1 "$LOGS/allocator_unwarmed.log")" >> "$SUMMARY"
  grep -E "^(FAILED|E  )" "$LOGS/allocator.log" "$LOGS/allocator_unwarmed.log" | cut -c1-300 | head -8 >> "$SUMMARY"
fi
if step warm; then  # the seeds built and checked against cuDNN once: the earlier run's conditions (its builds cached)
  for SEED in attention_fa2 attention_hopper; do
    timeout 75 evokernel check $SEEDS/$SEED.cu --task attention-fwd --scenarios fa3-2k --original cudnn \
      > "$LOGS/warm_$SEED.log" 2>&1
    echo "warm $SEED rc $?: $(grep -i 'geomean' "$LOGS/warm_$SEED.log" | tail -1)" >> "$SUMMARY"
  done
fi
if step knobs; then  # as attention_hopper/RESULTS.md's "recorded knob search" (9.8 a minute before the runner)
  STARTED=$(date +%s.%N)
  timeout 470 evokernel run experiments/attention_hopper/config.yaml --wall-time 400 --budget 200 \
    --runs-dir "$LOGS/knob_runs" > "$LOGS/knobs.log" 2>&1
  echo "knobs rc $?" >> "$SUMMARY"
  python3 - "$(ls -d "$LOGS"/knob_runs/2* | tail -1)" "$STARTED" "$(date +%s.%N)" >> "$SUMMARY" 2>&1 <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from search_throughput import steady_state
from evokernel.store import Store
run, started, ended = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
with Store(run, readonly=True) as store:
    rows = [r for r in store.individuals() if r.finished_at]
    first = min(r.started_at for r in rows if r.started_at)
children = [r for r in rows if r.operator != "seed"]
busy, per_minute = steady_state(run, 1)
print(f"knobs: {len(rows)} evaluations ({len(children)} children) in {ended - started:.0f} s of command "
      f"({60 * len(rows) / (ended - started):.1f} a minute), {max(r.finished_at for r in rows) - first:.0f} s "
      f"from the first evaluation's start ({60 * len(rows) / (max(r.finished_at for r in rows) - first):.1f} a "
      f"minute); children {per_minute:.1f} a minute in steady state, slot busy {busy:.0%}")
PY
fi
date -u +"end %Y-%m-%d %H:%M:%S UTC" >> "$SUMMARY"
cat "$SUMMARY"
