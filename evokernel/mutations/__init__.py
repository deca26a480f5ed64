"""Mutation operators: how a child kernel is proposed from one or two parents.

The operators themselves are the modules of `evokernel.mutations.operators`, each holding classes decorated
with `register`; beside them, what the LLM-asking ones share: `prompts` (what a model is told; `build_log`: what
of a build log it is shown), `edits`
(applying its answer), `llm` and `command_model` (calling a model). A registered class's
`name`, `arity` and `uses_llm` and the registration's default weight are all that the config (which
accepts the weight of any registered name) and the search (which uses the operators whose weight is
positive, those that use an LLM only when a model is configured) need.
Knob operators need no LLM; question operators ask a question from the bank through an LLM.
Interface: `Parent`, `Proposal`, `ProposalFailed`, `AnswerPending`, `Context`, `Operator`, `Option`, `Registration`,
`register`,
`registered_operators`, `llm_operator_names`.
"""

from __future__ import annotations

import importlib
import pkgutil
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
    notes: str = ""  # the latest notes people or tools put on it (`evokernel note`): profiler figures, remarks


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


class AnswerPending(Exception):
    """The question was posted for an answer that arrives later (the `files` model): no child yet, and no
    failure; the search takes the answer when it is given (`evokernel.search.answers`)."""

    def __init__(self, prompt_id: str) -> None:
        super().__init__(f"prompt {prompt_id} waits for an answer")
        self.prompt_id = prompt_id


@dataclass
class Context:
    """What the search hands an operator besides the parents."""

    rng: random.Random
    task: Any  # evokernel.harness.Task: the loaded task (a built-in or a directory), never looked up again by name
    trigger: str = "default"  # the active question trigger
    store: Any = None  # evokernel.store.Store, for recording LLM calls
    services: dict[str, Any] = field(default_factory=dict)  # shared clients (LLM, bank policy)
    question: Any = None  # a bank Question to ask instead of one the policy chooses (a person's, `evokernel ask`)
    # The search's account of earlier answers to a question (question id, kernel ids to leave out) -> text
    answers_to: Any = None

    @property
    def language(self) -> str:
        return self.task.language


class Operator(Protocol):
    """What the search calls. An operator of arity 2 or more may also define `mates(first, other) -> bool`
    (both the population's kernels, with `.source`): its later parents are then drawn only among the
    kernels it accepts with the first (knob crossover needs the same knobs)."""

    name: str
    arity: int  # parents it takes
    uses_llm: bool
    options: tuple[Option, ...]  # what a config may set besides its weight (may be left out: none)

    def __call__(self, parents: list[Parent], context: Context) -> Proposal: ...


@dataclass(frozen=True)
class Option:
    """A setting an operator declares and a config may give it (`operators: {NAME: {weight: W, OPTION: V}}`);
    the config checks every given value against the operator's own declaration (its type is the default's)."""

    name: str
    meaning: str
    default: bool | int | float
    minimum: float | None = None
    maximum: float | None = None

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this option's setting (None: it can)."""
        kind = type(self.default)
        fits = (isinstance(value, bool) if kind is bool else
                isinstance(value, int) and not isinstance(value, bool) if kind is int else
                isinstance(value, (int, float)) and not isinstance(value, bool))
        if not fits:
            return f"expected {'a number' if kind is float else kind.__name__}, got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"{value} is below its minimum {self.minimum:g}"
        if self.maximum is not None and value > self.maximum:
            return f"{value} is above its maximum {self.maximum:g}"
        return None


@dataclass(frozen=True)
class Registration:
    """A registered operator: how to build it from the run's config, and what the config must hold for it."""

    name: str
    factory: Callable[..., Operator]  # called with the RunConfig
    uses_llm: bool  # built only when the config names a model (llm.models)
    default_weight: float  # its weight when the config's `operators` does not name it
    options: tuple[Option, ...] = ()  # what a config may set besides the weight (the class's `options`)

    def settings(self, config: Any = None) -> dict[str, Any]:
        """This operator's option values in `config` (a RunConfig; None: the declared defaults)."""
        given = config.operators.options(self.name) if config is not None else {}
        return {option.name: given.get(option.name, option.default) for option in self.options}


_REGISTRY: dict[str, Registration] = {}


def register(default_weight: float) -> Callable:
    """Class decorator: make an operator class available to configs under its `name`, weighted
    `default_weight` unless a config says otherwise."""

    def decorate(factory: type) -> type:
        _REGISTRY[factory.name] = Registration(factory.name, factory, factory.uses_llm, default_weight,
                                               tuple(getattr(factory, "options", ())))
        return factory

    return decorate


def registered_operators() -> dict[str, Registration]:
    """Every registered operator, by name (importing each module of `evokernel.mutations.operators`: an
    operator's module registers it as it is imported)."""
    from evokernel.mutations import operators as family

    for module in pkgutil.iter_modules(family.__path__):
        importlib.import_module(f"{family.__name__}.{module.name}")
    return dict(_REGISTRY)


def llm_operator_names() -> list[str]:
    """The registered operators that ask an LLM (they need a model in the config)."""
    return sorted(name for name, registration in registered_operators().items() if registration.uses_llm)
