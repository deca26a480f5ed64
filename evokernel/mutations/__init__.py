"""Mutation operators: how a child kernel is proposed from one or two parents.

Operators are registered by name (`register`) and looked up by the search, which builds a DEAP
toolbox from the ones whose weight is positive. Knob operators need no LLM; question operators
ask a question from the bank through an LLM. Interface: `Parent`, `Proposal`, `ProposalFailed`,
`Context`, `Operator`, `register`, `operators`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


@dataclass
class Parent:
    """What an operator may know of a parent kernel."""

    id: int
    source: str
    fitness: float | None
    knobs: dict[str, Any] = field(default_factory=dict)
    report: dict | None = None  # the harness's CheckReport as a dict: per-scenario results, failure
    lineage: str = ""  # short summary of earlier questions on this line and what came of them


@dataclass
class Proposal:
    """A child kernel and how it was made (recorded in the lineage store)."""

    source: str
    operator: str
    parent_ids: list[int]
    question_id: str | None = None
    trigger: str | None = None
    model: str | None = None
    llm_call_id: int | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    declared_limit: bool = False  # the answer said the kernel is at a limit / done, or changed nothing


class ProposalFailed(Exception):
    """The operator could not produce a child (unparseable answer, LLM error); recorded, never fatal."""

    def __init__(self, reason: str, llm_call_id: int | None = None) -> None:
        super().__init__(reason)
        self.llm_call_id = llm_call_id


@dataclass
class Context:
    """What the search hands an operator besides the parents."""

    rng: random.Random
    task_name: str
    language: str
    trigger: str = "default"  # the active question trigger
    store: Any = None  # evokernel.store.Store, for recording LLM calls
    services: dict[str, Any] = field(default_factory=dict)  # shared clients (LLM, bank policy)


class Operator(Protocol):
    name: str
    arity: int  # parents it takes
    uses_llm: bool

    def __call__(self, parents: list[Parent], context: Context) -> Proposal: ...


_REGISTRY: dict[str, Callable[..., Operator]] = {}


def register(name: str) -> Callable:
    """Class decorator: make an operator factory available to configs under `name`."""

    def decorate(factory: Callable[..., Operator]) -> Callable[..., Operator]:
        _REGISTRY[name] = factory
        return factory

    return decorate


def operators() -> dict[str, Callable[..., Operator]]:
    """All registered operator factories (importing the modules that define them)."""
    from evokernel.mutations import knobs, questions  # noqa: F401  (their operators register themselves)

    return dict(_REGISTRY)
