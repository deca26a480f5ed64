"""Which questions pay: per-question statistics over one or more runs, and the bandit's counts.

`question_stats` sums the per-run figures of `evokernel.lineage` (asked, correct, improved, mean
gain) over several runs; `outcome_counts` gives the policy its (asked, beat-parent) counts, either
from a live store or from earlier runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd

from evokernel.errors import BadInput, read_yaml

COLUMNS = ["question_id", "asked", "correct", "better", "mean_gain", "text"]


def question_stats(run_dirs: list[Path]) -> pd.DataFrame:
    """Per question over all `run_dirs`: times asked, children correct, children better than their
    parent, and the mean gain (child over best parent, minus one) of the children whose gain is known."""
    from evokernel.lineage import Lineage

    totals: dict[str, dict] = {}
    for run_dir in run_dirs:
        with Lineage(Path(run_dir)) as run:
            frame = run.question_stats()
            measured = defaultdict(int)
            for ind in run.individuals.values():
                if ind.question_id and run.gain(ind) is not None:
                    measured[ind.question_id] += 1
            for row in frame.itertuples(index=False):
                total = totals.setdefault(row.question_id, {"question_id": row.question_id, "asked": 0, "correct": 0,
                                                            "better": 0, "gain_sum": 0.0, "gain_n": 0, "text": None})
                total["asked"] += int(row.asked)
                total["correct"] += int(row.correct)
                total["better"] += int(row.improved)
                if row.mean_gain is not None and not pd.isna(row.mean_gain):
                    total["gain_sum"] += row.mean_gain * measured[row.question_id]
                    total["gain_n"] += measured[row.question_id]
                total["text"] = total["text"] or row.text
    texts = _bank_texts(run_dirs)
    rows = [{**t, "mean_gain": t["gain_sum"] / t["gain_n"] if t["gain_n"] else None,
             "text": t["text"] or texts.get(t["question_id"])} for t in totals.values()]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["better", "asked", "question_id"], ascending=[False, False, True], ignore_index=True)


def _bank_texts(run_dirs: list[Path]) -> dict[str, str]:
    """Question texts from the banks the runs were configured with (user banks that still exist)."""
    from evokernel.bank.questions import load_bank

    texts: dict[str, str] = {}
    for run_dir in run_dirs:
        config_path = Path(run_dir) / "config.yaml"
        config = read_yaml(config_path) if config_path.is_file() else None  # BadInput naming it when unreadable
        bank = (config or {}).get("bank") or {}
        dirs = [Path(d) for d in bank.get("dirs", []) if Path(d).is_dir()]
        try:
            texts.update({q.id: q.text for q in load_bank(dirs, builtin=bank.get("builtin", True))})
        except BadInput:  # a bank changed since the run: show the ids without text
            continue
    return texts


def outcome_counts(db) -> dict[str, tuple[int, int]]:
    """Per question in one lineage database (an sqlite3 connection): (evaluated children, children
    that beat their best parent). Pending children are not counted yet."""
    rows = db.execute("SELECT id, parent_ids, question_id, status, fitness FROM individuals").fetchall()
    fitness = {row[0]: row[4] for row in rows}
    counts: dict[str, list[int]] = {}
    for _, parent_ids, question_id, status, child_fitness in rows:
        if not question_id or status not in ("correct", "rejected"):
            continue
        entry = counts.setdefault(question_id, [0, 0])
        entry[0] += 1
        parents = [fitness.get(p) for p in json.loads(parent_ids)]
        known = [f for f in parents if f is not None]
        if status == "correct" and child_fitness is not None and known and child_fitness > max(known):
            entry[1] += 1
    return {q: (asked, wins) for q, (asked, wins) in counts.items()}


def prior_from_runs(run_dirs: list[Path]) -> dict[str, tuple[int, int]]:
    """Summed outcome counts of earlier runs: the bandit's prior."""
    from evokernel.store import open_readonly

    prior: dict[str, tuple[int, int]] = {}
    for run_dir in run_dirs:
        with open_readonly(Path(run_dir)) as store:
            for question_id, (asked, wins) in outcome_counts(store.db).items():
                old = prior.get(question_id, (0, 0))
                prior[question_id] = (old[0] + asked, old[1] + wins)
    return prior
