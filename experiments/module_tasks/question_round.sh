#!/usr/bin/env bash
# One round of a short question-driven search of each example module's CUDA task, on the GPU machine (device
# tool), answered through the `files` model as the Hopper search is: the first round writes each task (no
# original: the first kernel under examples/modules is the run's seed), evaluates the seed and writes prompts;
# each later round resumes the runs (the answers given in between become children) and checks each run's best
# against PyTorch eager and torch.compile on the `scaled` scenarios.
#   after the pydeps and `pip install -e .` lines; the runs travel as experiments/module_tasks/runs/qruns.tar.xz:
#   mkdir -p experiments/module_tasks/qruns && tar xJf experiments/module_tasks/runs/qruns.tar.xz -C experiments/module_tasks/qruns
#   bash experiments/module_tasks/question_round.sh   # $OUT: module-summary.txt, qruns.tar.xz, checks.tar.gz
# EXAMPLES (optional): "task:file.cu ..." pairs.
set -uo pipefail
ROOT=experiments/module_tasks/qruns
LOGS=/tmp/module_round
mkdir -p "$ROOT/tasks" "$ROOT/runs" "$LOGS" "${OUT:?}"
export LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONUNBUFFERED=1 COLUMNS=200
EXAMPLES=${EXAMPLES:-"row-softmax:row_softmax.cu layernorm:layernorm.cu linear-bias-gelu:linear_bias_gelu_wmma.cu
  linear-residual-rmsnorm:linear_residual_rmsnorm.cu"}
date -u +"start %Y-%m-%d %H:%M UTC" >> "$OUT/module-summary.txt"
for pair in $EXAMPLES; do
  name=${pair%%:*}; kernel=examples/modules/${pair#*:}; task=$ROOT/tasks/$name; runs=$ROOT/runs/$name
  run=$(ls -d "$runs"/2* 2>/dev/null | tail -1)
  if [ -z "$run" ]; then
    if [ ! -d "$task" ]; then  # no original: the example's first kernel is the run's seed; no knobs to mutate
      evokernel task new "$name" --from-module "examples/modules/${name//-/_}.py" --language cuda \
        -o "$task" > "$LOGS/$name.new.log" 2>&1
      printf 'operators: {knob-mutation: 0, knob-crossover: 0, question-mutation: 2.0, repair: 1.0}\n' >> "$task/config.yaml"
    fi
    timeout 150 evokernel run "$task/config.yaml" --model files --seed-kernel "$kernel" --runs-dir "$runs" \
      > "$LOGS/$name.run.log" 2>&1
    run=$(ls -d "$runs"/2* 2>/dev/null | tail -1)
  else  # the run records its task's absolute path, and the working tree's place may differ between machines
    sed -i "s|^task: .*|task: $PWD/$task|" "$run/config.yaml"
    timeout 200 evokernel run --resume "$run" > "$LOGS/$name.run.log" 2>&1
    best=$(python3 -c "
from evokernel.store import Store
with Store('$run', readonly=True) as store:
    best = store.best(1)[0]
    print(store.source_path(best.source_hash, best.language))")
    timeout 150 evokernel check "$best" --task "$task" --scenarios scaled --original compile --baselines \
      --json "$LOGS/$name-best.json" > "$LOGS/$name-best.check.log" 2>&1
  fi
  echo "$name: $(grep -E '^run finished|^best kernel' "$LOGS/$name.run.log" | tr '\n' ' ')" >> "$OUT/module-summary.txt"
  tar cJf "$OUT/qruns.tar.xz" -C "$ROOT" . && tar czf "$OUT/checks.tar.gz" -C "$LOGS" .
done
ls "$LOGS"/*-best.json > /dev/null 2>&1 && python3 experiments/module_tasks/table.py "$LOGS"/*-best.json >> "$OUT/module-summary.txt"
date -u +"end %Y-%m-%d %H:%M UTC" >> "$OUT/module-summary.txt"
cat "$OUT/module-summary.txt"
