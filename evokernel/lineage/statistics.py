"""Whole-run statistics: which questions paid (in one run or summed over several), why kernels were
rejected, why proposals made no kernel, the best over evaluations, what the LLM cost, and the one-line
summaries of `evokernel runs`."""

from __future__ import annotations

import sqlite3
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from evokernel.errors import BadInput
from evokernel.harness.report import rejection_kind
from evokernel.lineage.view import Lineage
from evokernel.store import DEFAULT_RUNS, Store, iter_runs, run_status

# the kind of the failed proposals a run recorded before schema version 3 counted, by operator only, in its meta
UNRECORDED = "reason not recorded"


@dataclass
class RunSummary:
    """One line of `evokernel runs`."""

    id: str
    path: Path
    status: str
    task: str | None
    stop_reason: str | None
    evaluations: int
    correct: int
    best: float | None
    best_id: int | None
    cost_usd: float
    started_at: float | None
    proposal_failures: list[dict] = field(default_factory=list)  # {operator, kind, count}, most frequent first
    driver_gone: bool = False  # recorded as running, but no driver holds the run (killed)


def best_over_evaluations(run: Lineage) -> pd.DataFrame:
    """evaluation (1-based), id, fitness (None when rejected), best so far, best id."""
    rows, best, best_id = [], None, None
    for n, ind in enumerate(run.evaluated(), start=1):
        if ind.fitness is not None and ind.status == "correct" and (best is None or ind.fitness > best):
            best, best_id = ind.fitness, ind.id
        rows.append({"evaluation": n, "id": ind.id, "status": ind.status, "fitness": ind.fitness,
                     "best": best, "best_id": best_id})
    return pd.DataFrame(rows, columns=["evaluation", "id", "status", "fitness", "best", "best_id"])


def _question_rows(run: Lineage) -> dict[str, dict]:
    """Per question id: asked (children plus answered LLM calls that gave none; attempts that got no answer,
    such as rate-limited retries, are not counted), correct, improved, and the gains (child over best parent)
    of its children whose gain is known."""
    stats: dict[str, dict] = {}

    def entry(qid: str) -> dict:
        return stats.setdefault(qid, {"question_id": qid, "asked": 0, "correct": 0, "improved": 0, "gains": []})

    for ind in run.individuals.values():
        if not ind.question_id:
            continue
        row = entry(ind.question_id)
        row["asked"] += 1
        row["correct"] += ind.status == "correct"
        gain = run.gain(ind)
        if gain is not None:
            row["gains"].append(gain)
            row["improved"] += gain > 1
    for question_id, count in run.store.childless_answers().items():
        entry(question_id)["asked"] += count
    return stats


def _gain_summary(gains: list[float]) -> dict[str, float | None]:
    """Mean, median and best gain (minus one) of a question's children; None without any."""
    if not gains:
        return {"mean_gain": None, "median_gain": None, "best_gain": None}
    return {"mean_gain": sum(gains) / len(gains) - 1, "median_gain": statistics.median(gains) - 1,
            "best_gain": max(gains) - 1}


def question_stats(run: Lineage) -> pd.DataFrame:
    """Per question id: asked, correct, improved, mean, median and best gain (see `_question_rows`)."""
    rows = []
    for row in _question_rows(run).values():
        row.update(_gain_summary(row.pop("gains")))
        row["text"] = run.question_text(row["question_id"]) or ""  # empty when unknown
        rows.append(row)
    columns = ["question_id", "asked", "correct", "improved", "mean_gain", "median_gain", "best_gain", "text"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["improved", "asked", "question_id"], ascending=[False, False, True],
                             ignore_index=True)


def questions_over_runs(run_dirs: list[Path]) -> pd.DataFrame:
    """Per question over all `run_dirs`: times asked, children correct, children better than their
    parent, and the mean and median gain (child over best parent, minus one) of the children whose gain is known."""
    from evokernel.bank import configured_question_texts

    totals: dict[str, dict] = {}
    for run_dir in run_dirs:
        with Lineage(Path(run_dir)) as run:
            for row in _question_rows(run).values():
                total = totals.setdefault(row["question_id"], {"question_id": row["question_id"], "asked": 0,
                                                               "correct": 0, "better": 0, "gains": [], "text": None})
                total["asked"] += row["asked"]
                total["correct"] += row["correct"]
                total["better"] += row["improved"]
                total["gains"] += row["gains"]
                total["text"] = total["text"] or run.question_text(row["question_id"])
    texts = configured_question_texts(run_dirs)
    rows = []
    for total in totals.values():
        summary = _gain_summary(total.pop("gains"))
        rows.append({**total, "mean_gain": summary["mean_gain"], "median_gain": summary["median_gain"],
                     "text": total["text"] or texts.get(total["question_id"])})
    frame = pd.DataFrame(rows, columns=["question_id", "asked", "correct", "better", "mean_gain", "median_gain", "text"])
    return frame.sort_values(["better", "asked", "question_id"], ascending=[False, False, True], ignore_index=True)


def failures(run: Lineage) -> pd.DataFrame:
    """Rejections grouped by reason: reason, count, ids (most frequent first)."""
    names = set(run.scenario_names())
    groups: dict[str, list[int]] = {}
    for ind in run.individuals.values():
        if ind.status == "rejected":
            groups.setdefault(rejection_kind(ind.failure, names), []).append(ind.id)
    rows = [{"reason": r, "count": len(ids), "ids": ids} for r, ids in groups.items()]
    frame = pd.DataFrame(rows, columns=["reason", "count", "ids"])
    return frame.sort_values(["count", "reason"], ascending=[False, True], ignore_index=True)


def proposal_failure_counts(store: Store) -> Counter:
    """Failed proposals by (operator, kind of reason), from the run's database. Failures the meta's
    per-operator counters hold beyond those (a run recorded before schema version 3) count as UNRECORDED."""
    failed = store.proposal_failures()
    counts = Counter((f.operator, f.kind) for f in failed)
    recorded = Counter(f.operator for f in failed)
    for operator, total in ((store.meta().get("counters") or {}).get("proposal_failures") or {}).items():
        if total > recorded[operator]:
            counts[(operator, UNRECORDED)] += total - recorded[operator]
    return counts


def describe_proposal_failures(counts: Counter) -> str:
    """Failed proposals in one line, most frequent first: `operator: kind ×count; ...`."""
    return "; ".join(f"{operator}: {kind} ×{n}" for (operator, kind), n in counts.most_common())


def proposal_failures(run: Lineage) -> pd.DataFrame:
    """Failed proposals grouped by operator and kind of reason: operator, kind, count and the first reason
    in full (None for UNRECORDED ones), most frequent first."""
    first: dict[tuple[str, str], str] = {}
    for failure in run.store.proposal_failures():
        first.setdefault((failure.operator, failure.kind), failure.reason)
    rows = [{"operator": operator, "kind": kind, "count": n, "example": first.get((operator, kind))}
            for (operator, kind), n in proposal_failure_counts(run.store).most_common()]
    return pd.DataFrame(rows, columns=["operator", "kind", "count", "example"])


def llm_cost(run: Lineage) -> pd.DataFrame:
    """Per model: calls, cached answers, errors, tokens, cost, mean latency."""
    calls = pd.DataFrame(run.store.llm_calls(), columns=[
        "id", "model", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s", "cached", "error"])
    calls["failed"] = calls["error"].notna()
    frame = calls.groupby("model", as_index=False).agg(
        calls=("id", "count"), cached=("cached", "sum"), errors=("failed", "sum"),
        prompt_tokens=("prompt_tokens", "sum"), completion_tokens=("completion_tokens", "sum"),
        cost_usd=("cost_usd", "sum"), mean_latency_s=("latency_s", "mean"))
    return frame.sort_values("cost_usd", ascending=False, ignore_index=True)


def run_summary(run: Lineage) -> RunSummary:
    """The line of `evokernel runs` for one run."""
    meta = run.store.meta()
    best = run.top(1)
    started = meta.get("started_at") or min((i.created_at for i in run.individuals.values()), default=None)
    status = run_status(run.run_dir, meta.get("status"))
    driver_gone = status == "stopped" and meta.get("status") == "running"
    stop_reason = (f"its driver is gone (killed?): resume it with evokernel run --resume {run.run_dir}"
                   if driver_gone else meta.get("stop_reason"))
    return RunSummary(id=run.name, path=run.run_dir, status=status, driver_gone=driver_gone,
                      task=meta.get("task") or (meta.get("config") or {}).get("task"),
                      stop_reason=stop_reason, evaluations=len(run.evaluated()),
                      correct=sum(i.status == "correct" for i in run.individuals.values()),
                      best=best[0].fitness if best else None, best_id=best[0].id if best else None,
                      cost_usd=run.store.total_cost(), started_at=started,
                      proposal_failures=[{"operator": operator, "kind": kind, "count": n} for (operator, kind), n
                                         in proposal_failure_counts(run.store).most_common()])


def find_runs(root: Path = DEFAULT_RUNS) -> list[RunSummary]:
    """Summaries of the runs under `root`, newest first; unreadable runs are skipped with a note."""
    if not root.is_dir():
        raise BadInput(f"no runs directory {root}/")
    summaries = []
    for path in iter_runs(root):
        try:
            with Lineage(path) as run:
                summaries.append(run_summary(run))
        except (BadInput, sqlite3.DatabaseError) as exc:
            summaries.append(RunSummary(path.name, path, f"unreadable: {exc}", None, None, 0, 0, None, None, 0.0, None))
    return summaries
