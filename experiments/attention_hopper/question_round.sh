#!/usr/bin/env bash
# One round of the question-driven search of the Hopper seed, on the GPU machine (device tool):
# the first round starts the run (the seed is evaluated, prompts are written); each later round resumes the
# run carried in experiments/attention_hopper/qruns/ (the answers given in between become children and are
# evaluated; new prompts are written). What comes back under $OUT: the run directory as run.tar.xz (a .tar.gz of it,
# several MB, is more than the device tool returns), the run's log, its lineage tree and open prompts.
#   device run, carry [".carry"]; the run travels as its archive (tar cJf runs/RUN.tar.xz -C qruns RUN: xz keeps
#   it under 1 MB, where the prompts' repeated kernels make a copied run folder tens of MB):
#   mkdir -p /tmp/site && tar xJf .carry/pydeps.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD;
#   python3 -m pip install -q --no-deps --no-build-isolation -e . && mkdir -p experiments/attention_hopper/qruns &&
#   tar xJf experiments/attention_hopper/runs/RUN.tar.xz -C experiments/attention_hopper/qruns &&
#   bash experiments/attention_hopper/question_round.sh
# BUDGET (optional): the run's evaluation budget from this round on (a resumed run keeps its own otherwise).
# PROFILE_TOP (optional): before a resumed round, profile the run's best N kernels under Nsight Compute and put the
# figures on them as notes (profile_kernels.py), so that the prompts this round writes show them; $OUT/profile.tar.xz.
set -uo pipefail
RUNS=experiments/attention_hopper/qruns
mkdir -p "$RUNS" "${OUT:?}"
export PYTHONUNBUFFERED=1 COLUMNS=200
RUN=$(ls -d "$RUNS"/2* 2>/dev/null | tail -1)
if [ -n "$RUN" ] && [ -n "${PROFILE_TOP:-}" ]; then
  mkdir -p "$OUT/profile"
  OUT="$OUT/profile" timeout 300 python3 experiments/attention_hopper/profile_kernels.py "$RUN" --top "$PROFILE_TOP" \
    > "$OUT/profile/profile.txt" 2>&1
  tar cJf "$OUT/profile.tar.xz" -C "$OUT" profile && rm -rf "$OUT/profile"
fi
if [ -n "$RUN" ]; then
  evokernel run --resume "$RUN" ${BUDGET:+--budget "$BUDGET"} 2>&1 | tee "$OUT/run.log"
else
  evokernel run experiments/attention_hopper/questions.yaml --runs-dir "$RUNS" 2>&1 | tee "$OUT/run.log"
  RUN=$(ls -d "$RUNS"/2* | tail -1)
fi
evokernel lineage "$RUN" --tree > "$OUT/tree.txt" 2>&1
evokernel prompts "$RUN" > "$OUT/prompts.txt" 2>&1
rm -f "$RUN/driver.lock"
tar cJf "$OUT/run.tar.xz" -C "$RUNS" "$(basename "$RUN")"
