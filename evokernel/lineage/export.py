"""A run as tables (pandas), for `evokernel export`: kernels, per-scenario results, LLM calls, questions
people asked."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

import pandas as pd

from evokernel.lineage.view import Lineage

INDIVIDUAL_COLUMNS = ["id", "parent_ids", "generation", "operator", "question_id", "trigger", "model",
                      "llm_call_id", "status", "fitness", "fitness_over_parent", "failure", "language", "source",
                      "source_hash", "normalized_hash", "knobs", "created_at", "started_at", "finished_at",
                      "eval_seconds", "worker", "device"]


def individuals_table(run: Lineage) -> pd.DataFrame:
    """One row per kernel (the harness report lives in the scenario table), with parent gain."""
    rows = []
    for ind in run.individuals.values():
        gain = run.gain(ind)
        rows.append({
            "id": ind.id, "parent_ids": ",".join(map(str, ind.parent_ids)), "generation": ind.generation,
            "operator": ind.operator, "question_id": ind.question_id, "trigger": ind.trigger,
            "model": ind.model, "llm_call_id": ind.llm_call_id, "status": ind.status, "fitness": ind.fitness,
            "fitness_over_parent": gain, "failure": ind.failure, "language": ind.language,
            "source": run.source_name(ind.id), "source_hash": ind.source_hash,
            "normalized_hash": ind.normalized_hash, "knobs": json.dumps(ind.knobs, sort_keys=True),
            "created_at": ind.created_at,
            "started_at": ind.started_at, "finished_at": ind.finished_at, "eval_seconds": ind.eval_seconds,
            "worker": ind.worker, "device": ind.device})
    return pd.DataFrame(rows, columns=INDIVIDUAL_COLUMNS)


def scenarios_table(run: Lineage) -> pd.DataFrame:
    """One row per kernel and scenario; the columns are there even when no kernel ran."""
    rows = [row for kernel in run.individuals for row in run.scenarios(kernel)]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=run.store.table_columns("scenario_results"))


def llm_calls_table(run: Lineage) -> pd.DataFrame:
    """One row per LLM call; the columns are there even in a run without any."""
    rows = run.store.llm_calls()
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=run.store.table_columns("llm_calls"))


def human_questions_table(run: Lineage) -> pd.DataFrame:
    """One row per question a person asked (`evokernel ask`), its layers and outcomes as JSON; the columns
    are there even in a run without any."""
    from evokernel.store import HumanQuestion

    rows = [{**asdict(q), **{name: json.dumps(getattr(q, name)) for name in HumanQuestion.JSON_FIELDS}}
            for q in run.store.human_questions()]
    return pd.DataFrame(rows, columns=[f.name for f in fields(HumanQuestion)])
