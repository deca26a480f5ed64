"""The rows of a run's database as Python values."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("pending", "running", "correct", "rejected")


@dataclass
class Individual:
    """One row of `individuals`: a kernel, where it came from and what the harness said of it."""

    operator: str
    source_hash: str
    normalized_hash: str
    language: str
    parent_ids: list[int] = field(default_factory=list)
    generation: int = 0
    question_id: str | None = None
    trigger: str | None = None
    model: str | None = None
    llm_call_id: int | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"
    fitness: float | None = None
    failure: str | None = None
    build_log: str | None = None
    report: dict | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    eval_seconds: float | None = None
    worker: str | None = None
    device: str | None = None
    id: int | None = None

    JSON_FIELDS = ("parent_ids", "knobs", "report")

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Individual":
        data = dict(row)
        for name in cls.JSON_FIELDS:
            data[name] = json.loads(data[name]) if data[name] is not None else None
        return cls(**data)


@dataclass
class LLMCall:
    """One row of `llm_calls`: a prompt, its answer, what it cost."""

    model: str
    prompt: str
    response: str | None = None
    operator: str | None = None
    question_id: str | None = None
    parent_ids: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float = 0.0
    latency_s: float | None = None
    cached: bool = False
    error: str | None = None
    reason: str | None = None  # why the call failed, in a few words (see mutations/llm.py failure_reason)
    question_key: str | None = None  # what defines the question (model, operator, question, parents): replay key
    created_at: float = field(default_factory=time.time)
    id: int | None = None


@dataclass(frozen=True)
class Outcome:
    """How a kernel did and where it came from, without its source or report (cheap to read at every step)."""

    id: int
    parent_ids: list[int]
    question_id: str | None
    status: str
    fitness: float | None



@dataclass
class HumanQuestion:
    """A question a person put to a run (`evokernel ask`): queued as a file in RUN/questions/ by `ask`, then
    a row of `human_questions` once the driver received it. `outcomes` has one entry per time it was asked:
    {"child": id}, {"duplicate_of": id} (the answer repeated a known kernel), {"failed": reason} or {"prompt": id}
    (put to the `files` model: the prompt's row says what its answer made)."""

    id: str  # of this request: one per `evokernel ask`
    question_id: str  # what children's `question_id` says: the same text always gets the same id
    text: str
    target: str  # "best" (the best kernel when it is asked) or a kernel id
    times: int
    asked_at: float
    asked_by: str | None = None
    layers: list[str] = field(default_factory=list)
    received_at: float | None = None  # when the driver took it from the queue
    outcomes: list[dict] = field(default_factory=list)

    JSON_FIELDS = ("layers", "outcomes")

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "HumanQuestion":
        data = dict(row)
        for name in cls.JSON_FIELDS:
            data[name] = json.loads(data[name])
        return cls(**data)

    @property
    def asked(self) -> int:
        """Times it was put to the model so far."""
        return len(self.outcomes)


@dataclass
class ProposalFailure:
    """A proposal that produced no kernel: the operator, the reason in full and its kind (for counting)."""

    operator: str
    kind: str
    reason: str
    parent_ids: list[int] = field(default_factory=list)
    llm_call_id: int | None = None
    created_at: float = 0.0
    id: int | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "ProposalFailure":
        data = dict(row)
        data["parent_ids"] = json.loads(data["parent_ids"])
        return cls(**data)


PROMPT_STATUSES = ("open", "answered", "failed", "withdrawn")


@dataclass
class OpenPrompt:
    """A prompt of the `files` model (RUN/prompts/ID.md): open until an answer (RUN/answers/ID.md) is taken;
    then `answered` (with the child it made), `failed` (with the reason) or `withdrawn` (by a person: no child)."""

    id: str
    operator: str
    prompt: str
    created_at: float
    question_id: str | None = None
    trigger: str | None = None
    parent_ids: list[int] = field(default_factory=list)
    question_key: str | None = None
    status: str = "open"
    answered_at: float | None = None
    answered_by: str | None = None
    llm_call_id: int | None = None
    child_id: int | None = None
    reason: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "OpenPrompt":
        data = dict(row)
        data["parent_ids"] = json.loads(data["parent_ids"])
        return cls(**data)
