"""What the search proposes with: the operators a config enables (registered in `evokernel.mutations`,
weighted by the config; those that ask an LLM only when a model is configured), and what an operator is
told of a parent kernel (its source, fitness, knobs, report and the steps that led to it)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any, Callable

from evokernel.bank import Question
from evokernel.config import RunConfig
from evokernel.harness import Task
from evokernel.mutations import Context, Operator, Parent, operators
from evokernel.population import Kernel
from evokernel.store import Individual, Store

LINEAGE_DEPTH = 4  # ancestors summarised for an operator


@dataclass
class Job:
    """A proposal to make: which operator, from which parents, for which island."""

    operator: str
    parents: list[Parent]
    island: int | None
    generation: int
    trigger: str = "default"
    question: Question | None = None  # a person's question (`evokernel ask`); None: the operator chooses one
    request_id: str | None = None  # the person's request it answers


def configured_operators(config: RunConfig, notify: Callable[[str], None]) -> dict[str, tuple[Operator, float]]:
    """name -> (operator, weight) for every registered operator the config weights above zero and can serve."""
    registered = operators()
    llm = bool(config.llm.models)
    if not llm:
        notify("no LLM model is configured (llm.models / --model): using the knob operators only")
    return {name: (registered[name].factory(config), weight) for name, weight in config.operators.as_dict().items()
            if weight > 0 and (llm or not registered[name].uses_llm)}


def operator_services(config: RunConfig, store: Store, llm: bool) -> dict[str, Any]:
    """Shared clients of the LLM operators (LLM client, bank, policy), when one is used and a model configured."""
    if not (llm and config.llm.models):
        return {}
    from evokernel.mutations.questions import build_services

    return build_services(config, store)


def parent_view(store: Store, kernel: Kernel | Individual, source: str | None = None) -> Parent:
    """What an operator is told of a parent: a population member, or a stored row (then with its `source`)."""
    fitness = kernel.fitness if isinstance(kernel, Individual) else kernel.fitness.values[1]
    return Parent(id=kernel.id, source=source if source is not None else kernel.source, fitness=fitness,
                  knobs=dict(kernel.knobs), report=kernel.report, lineage=lineage_summary(store, kernel.id))


def lineage_summary(store: Store, kernel_id: int) -> str:
    """Earlier steps on the first-parent line: operator, question and what came of them."""
    lines, current = [], store.individual(kernel_id)
    for _ in range(LINEAGE_DEPTH):
        if not current.parent_ids:
            break
        parent = store.individual(current.parent_ids[0])
        question = f" question {current.question_id}" if current.question_id else ""
        outcome = (f"{parent.fitness:.3f} -> {current.fitness:.3f}" if current.fitness and parent.fitness
                   else current.failure or current.status)
        lines.append(f"#{current.id} from #{parent.id} by {current.operator}{question}: {outcome}")
        current = parent
    return "\n".join(reversed(lines))


class OperatorContexts:
    """What the search hands an operator besides the parents; LLM operators run in proposal threads, and each
    thread gets its own store connection (SQLite connections stay in the thread that made them)."""

    def __init__(self, store: Store, task: Task, services: dict[str, Any]) -> None:
        self.store, self.task, self.services = store, task, services
        self._local = threading.local()

    def make(self, seed: float, trigger: str, question: Question | None = None) -> Context:
        """A context for the calling thread, its random choices drawn from `seed` (`question`: one to ask
        instead of the policy's choice)."""
        if threading.current_thread() is threading.main_thread():
            store = self.store
        else:
            if not hasattr(self._local, "store"):
                self._local.store = Store(self.store.run_dir)
            store = self._local.store
        return Context(rng=random.Random(seed), task=self.task,
                       trigger=trigger, store=store, services=self.services, question=question)
