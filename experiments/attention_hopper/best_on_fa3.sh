#!/usr/bin/env bash
# The question-driven search's best kernels on the whole `fa3` grid against cuDNN (device tool, after
# question_round.sh): the best N (default 2) correct kernels of the run in qruns/, or the kernels IDS names, one
# check each. Reports under $OUT as best-<id>-<hash>-fa3.{json,txt}; a short table last.
#   [IDS="194 190"] bash experiments/attention_hopper/best_on_fa3.sh [N]
set -uo pipefail
RUN=$(ls -d experiments/attention_hopper/qruns/2* | tail -1)
python3 - "$RUN" "${1:-2}" ${IDS:-} > "$OUT/best.txt" <<'PY'
import sys
from pathlib import Path
from evokernel.store import Store
with Store(Path(sys.argv[1]), readonly=True) as store:
    rows = [store.individual(int(i)) for i in sys.argv[3:]] or store.best(int(sys.argv[2]))
    for row in rows:
        print(row.id, store.source_path(row.source_hash, row.language), f"{row.fitness:.4f}")
PY
while read -r ID SRC FIT; do
  NAME=$(basename "$SRC" .cu)
  timeout 200 evokernel check "$SRC" --task attention-fwd --scenarios fa3 --original cudnn \
    --json "$OUT/best-$ID-$NAME-fa3.json" > "$OUT/best-$ID-$NAME-fa3.txt" 2>&1
  echo "#$ID ($NAME, fa3-2k $FIT): $(grep -i 'geomean' "$OUT/best-$ID-$NAME-fa3.txt" | tail -1)"
done < "$OUT/best.txt"
