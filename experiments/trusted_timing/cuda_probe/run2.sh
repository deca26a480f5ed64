#!/usr/bin/env bash
# The second CUDA runner probe (probe2.py) on the device machine, from the repository root:
#   bash experiments/trusted_timing/cuda_probe/run2.sh [ROUNDS] [PASSES]
# Builds the Hopper seed exactly as the harness does (languages.py's _nvcc_command) and the runner prototype
# under /tmp/cuda_probe, then runs probe2.py. Logs, probe2.json and summary.txt go under $OUT; the summary is
# printed last. Each step runs under `timeout`, a failing step does not stop the next, and the probe's budget
# is what is left of about 350 s from this script's start. Needs only the device image's python3 (torch) and nvcc.
set -u
HERE=experiments/trusted_timing/cuda_probe
OUT=${OUT:-/tmp/cuda_probe_out}
B=/tmp/cuda_probe
ROUNDS=${1:-400}
PASSES=${2:-2}
TOTAL=${TOTAL_S:-350}
mkdir -p "$OUT" "$B"
export PYTHONUNBUFFERED=1
LOG="$OUT/run.log"
{
  date -u +"start %Y-%m-%d %H:%M:%S UTC"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,compute_mode --format=csv
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  nvcc --version | tail -2
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.executable)"
  echo "kernel $(uname -r), $(nproc) cpus"
} > "$LOG" 2>&1

# 1. the seed, exactly as the harness builds it (languages.py loaded by path: no package imports)
timeout 150 python3 - "$B" >> "$LOG" 2>&1 <<'EOF'
import importlib.util, subprocess, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("evk_languages", "evokernel/harness/languages.py")
m = importlib.util.module_from_spec(spec)
sys.modules["evk_languages"] = m
spec.loader.exec_module(m)
task = Path("evokernel/builtin_tasks/attention_fwd")
cmd = m._nvcc_command(task / "seeds" / "attention_hopper.cu", task, Path(sys.argv[1]) / "kernel.so")
print("BUILD:", " ".join(cmd), flush=True)
proc = subprocess.run(cmd, capture_output=True, text=True)
print("\n".join(proc.stderr.splitlines()[-4:]))
sys.exit(proc.returncode)
EOF
echo "kernel build rc $? at ${SECONDS}s" >> "$LOG"
if [ ! -f "$B/kernel.so" ]; then  # the plain command, if the harness's could not be formed
  timeout 120 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC -cudart shared \
    -I evokernel/builtin_tasks/attention_fwd -o "$B/kernel.so" evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu >> "$LOG" 2>&1
  echo "fallback kernel build rc $? at ${SECONDS}s" >> "$LOG"
fi

# 2. the runner prototype (its null and spin kernels as sm_90 code)
CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
timeout 90 nvcc -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -cudart shared -Xlinker -rpath="$CUDA_ROOT/lib64" \
  -o "$B/runner_cuda" "$HERE/runner_cuda.cu" -ldl >> "$LOG" 2>&1
echo "runner build rc $? at ${SECONDS}s" >> "$LOG"
tail -3 "$LOG"

# 3. the probe, with what is left of the time
BUDGET=$(( TOTAL - SECONDS - 15 ))
[ "$BUDGET" -gt 280 ] && BUDGET=280
echo "probe budget ${BUDGET}s" >> "$LOG"
timeout $(( BUDGET + 10 )) python3 "$HERE/probe2.py" --runner "$B/runner_cuda" --kernel "$B/kernel.so" --out "$OUT" \
  --rounds "$ROUNDS" --passes "$PASSES" --budget "$BUDGET" > "$OUT/probe2.log" 2>&1
echo "probe rc $? at ${SECONDS}s" >> "$LOG"
{
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  date -u +"end %Y-%m-%d %H:%M:%S UTC"
} >> "$LOG" 2>&1
sed '/^=* SUMMARY/,$d' "$OUT/probe2.log" | grep -v "^\[timing\] pass\|^\[check\]" | tail -20 | cut -c1-700
echo "------ run.log"
cut -c1-300 "$LOG"
echo "------ summary"
cut -c1-1200 "$OUT/summary.txt" 2>/dev/null || tail -40 "$OUT/probe2.log"
