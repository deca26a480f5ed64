#!/usr/bin/env bash
# The question-driven search's best kernel and the seed, each checked on FlashAttention-3's whole grid (`fa3`,
# 30 scenarios) against cuDNN as the speed reference, one after the other on the GPU machine (device tool).
#   bash experiments/attention_hopper/final_check.sh    # after the pydeps and `pip install -e .` lines
set -uo pipefail
RUN=$(ls -d experiments/attention_hopper/qruns/2* | tail -1)
BEST=$(python3 -c "
from evokernel.store import Store
with Store('$RUN', readonly=True) as store:
    best = store.best(1)[0]
    print(store.source_path(best.source_hash, best.language))")
echo "best of $RUN: $BEST"
for kernel in "$BEST" evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu; do
  name=$(basename "$kernel" .cu)
  timeout 290 evokernel check "$kernel" --task attention-fwd --scenarios fa3 --original cudnn \
    --json "${OUT:?}/$name-fa3.json" 2>&1 | tee "$OUT/$name-fa3.txt"
done
