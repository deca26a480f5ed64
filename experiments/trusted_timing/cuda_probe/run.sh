#!/usr/bin/env bash
# The CUDA runner probe on the device machine, from the repository root:
#   bash experiments/trusted_timing/cuda_probe/run.sh [ROUNDS] [PARTS]
# Builds the Hopper seed exactly as the harness does (languages.py's _nvcc_command) and the runner prototype
# under /tmp/cuda_probe, then runs probe.py (PARTS: seccomp,timing,early). Logs, probe.json and summary.txt go
# under $OUT; the summary is printed last. Each step runs under `timeout` and a failing step does not stop the
# next. Needs only the device image's python3 (torch) and nvcc: no evokernel dependencies.
set -u
HERE=experiments/trusted_timing/cuda_probe
OUT=${OUT:-/tmp/cuda_probe_out}
B=/tmp/cuda_probe
ROUNDS=${1:-200}
PARTS=${2:-seccomp,timing,early}
mkdir -p "$OUT" "$B"
export PYTHONUNBUFFERED=1
LOG="$OUT/run.log"
{
  date -u +"start %Y-%m-%d %H:%M:%S UTC"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,compute_mode --format=csv
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  nvcc --version | tail -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  echo "kernel $(uname -r), $(nproc) cpus, affinity $(python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))')"
  echo "seccomp in /proc/self/status: $(grep -i seccomp /proc/self/status | tr '\n' ' ')"
  echo "seccomp actions_logged: $(cat /proc/sys/kernel/seccomp/actions_logged 2>&1); cmdline: $(cat /proc/cmdline)"
} > "$LOG" 2>&1

# 1. the seed, exactly as the harness builds it (languages.py loaded by path: no package imports)
timeout 240 python3 - "$B" >> "$LOG" 2>&1 <<'EOF'
import importlib.util, subprocess, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("evk_languages", "evokernel/harness/languages.py")
m = importlib.util.module_from_spec(spec)
sys.modules["evk_languages"] = m
spec.loader.exec_module(m)
cmd = m._nvcc_command(Path("evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu"), Path("evokernel/builtin_tasks/attention_fwd"),
                      Path(sys.argv[1]) / "kernel.so")
print("BUILD:", " ".join(cmd), flush=True)
proc = subprocess.run(cmd, capture_output=True, text=True)
print("\n".join(proc.stderr.splitlines()[-6:]))
sys.exit(proc.returncode)
EOF
echo "kernel build rc $?" >> "$LOG"
if [ ! -f "$B/kernel.so" ]; then  # the brief's plain command, if the harness's could not be formed
  timeout 240 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC -cudart shared \
    -I evokernel/builtin_tasks/attention_fwd -o "$B/kernel.so" evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu >> "$LOG" 2>&1
  echo "fallback kernel build rc $?" >> "$LOG"
fi

# 2. the runner prototype (its null and spin kernels as sm_90 code: nothing for the driver to compile at run time)
CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
timeout 120 nvcc -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -cudart shared -Xlinker -rpath="$CUDA_ROOT/lib64" \
  -o "$B/runner_cuda" "$HERE/runner_cuda.cu" -ldl >> "$LOG" 2>&1
echo "runner build rc $?" >> "$LOG"
ldd "$B/runner_cuda" | grep -i cuda >> "$LOG" 2>&1
tail -4 "$LOG"

# 3. the probe
timeout 330 python3 "$HERE/probe.py" --runner "$B/runner_cuda" --kernel "$B/kernel.so" --out "$OUT" \
  --rounds "$ROUNDS" --only "$PARTS" --budget 320 > "$OUT/probe.log" 2>&1
echo "probe rc $?" >> "$LOG"
{
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  date -u +"end %Y-%m-%d %H:%M:%S UTC"
} >> "$LOG" 2>&1
sed '/^=* SUMMARY/,$d' "$OUT/probe.log" | grep -v "^\[timing\]\|^\[early\]\|^\[startup\]" | tail -25 | cut -c1-600
echo "------ run.log"
cat "$LOG" | cut -c1-300
echo "------ summary"
cat "$OUT/summary.txt" 2>/dev/null | cut -c1-900
