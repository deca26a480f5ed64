"""What the search proposes with: the operators a config enables (registered in `evokernel.mutations`,
weighted by the config; those that ask an LLM only when a model is configured), and what an operator is
told of a parent kernel (its source, fitness, knobs, report and the steps that led to it)."""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from evokernel.bank import Question, configured_question_texts
from evokernel.config import RunConfig
from evokernel.harness import Task
from evokernel.mutations import Context, Operator, Parent, registered_operators
from evokernel.mutations.edits import CHANGE_SHOWN, CHANGE_SHOWN_GAINED, stated_change
from evokernel.population import Kernel
from evokernel.store import Individual, Outcome, Store, kernel_notes

LINEAGE_DEPTH = 8  # steps of a parent's first-parent line an operator is told of
CHILDREN_SHOWN = 6  # children already made from a parent an operator is told of (the latest)
SIDE_STEPS_SHOWN = 16  # other children of the line's ancestors an operator is told of (see _side_steps_shown)
KNOB_CHANGES_SHOWN = 4  # knob changes named per step
NOTES_SHOWN = 2  # latest notes on a kernel (`evokernel note`) an operator is told of


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
    registered = registered_operators()
    llm = bool(config.llm.models)
    if not llm:
        notify("no LLM model is configured (llm.models / --model): using the knob operators only")
    return {name: (registered[name].factory(config), weight) for name, weight in config.operators.as_dict().items()
            if weight > 0 and (llm or not registered[name].uses_llm)}


def operator_services(config: RunConfig, store: Store, llm: bool) -> dict[str, Any]:
    """Shared clients of the LLM operators (LLM client, bank, policy), when one is used and a model configured."""
    if not (llm and config.llm.models):
        return {}
    from evokernel.mutations.operators.questions import build_services

    return build_services(config, store)


def parent_view(store: Store, kernel: Kernel | Individual, source: str | None = None) -> Parent:
    """What an operator is told of a parent: a population member, or a stored row (then with its `source`)."""
    fitness = kernel.fitness if isinstance(kernel, Individual) else kernel.fitness.values[1]
    return Parent(id=kernel.id, source=source if source is not None else kernel.source, fitness=fitness,
                  knobs=dict(kernel.knobs), report=kernel.report, lineage=lineage_summary(store, kernel.id),
                  notes=notes_shown(store, kernel.id))


def notes_shown(store: Store, kernel_id: int) -> str:
    """The kernel's latest notes (NOTES_SHOWN), each with who gave it and when, oldest first."""
    return "".join(f"From {note.by or 'an unnamed source'}, {note.written}:\n{note.text.strip()}\n\n"
                   for note in kernel_notes(store.run_dir, kernel_id, latest=NOTES_SHOWN))


def lineage_summary(store: Store, kernel_id: int) -> str:
    """The kernel's gain history, oldest first (each step of its first-parent line: operator, question, knob
    changes, fitness before and after), what else was tried from the kernels of that line (its ancestors'
    other children), then the children already made from it and what came of them: an answer then builds on
    what gained and does not repeat what was tried."""
    texts = _question_texts(store)
    kernel = current = store.individual(kernel_id)
    steps: list[str] = []
    ancestors: list[int] = []
    while current.parent_ids and len(steps) < LINEAGE_DEPTH:
        parent = store.individual(current.parent_ids[0])
        steps.append(_step(store, current, parent, texts))
        ancestors.append(parent.id)
        current = parent
    steps.append("(earlier steps not shown)" if current.parent_ids
                 else f"#{current.id} {current.operator}: {_fitness(current)}")
    lines = list(reversed(steps))
    outcomes = store.outcomes()
    beside = [o for o in outcomes if o.parent_ids[:1] and o.parent_ids[0] in ancestors
              and o.id not in (kernel_id, *ancestors)]
    if beside:
        shown_beside = _side_steps_shown(beside, {o.id: o for o in outcomes})
        earlier = len(shown_beside) - SIDE_STEPS_SHOWN // 2
        count = (f"{len(beside)}; the latest {SIDE_STEPS_SHOWN // 2} and the {earlier}"
                 " earlier ones that moved the fitness most are shown" if len(beside) > len(shown_beside)
                 else len(beside))
        lines.append(f"Also tried from the kernels of this line ({count}; latest last):")
        lines += [_step(store, store.individual(o.id), store.individual(o.parent_ids[0]), texts)
                  for o in shown_beside]
    children = [o.id for o in outcomes if o.parent_ids[:1] == [kernel_id]]
    if children:
        shown = children[-CHILDREN_SHOWN:]
        count = f"{len(children)}, the latest {len(shown)} shown" if len(children) > len(shown) else len(children)
        lines.append(f"Already made from #{kernel_id} ({count}; latest last):")
        lines += [_step(store, store.individual(child), kernel, texts) for child in shown]
    return "\n".join(lines)


def answers_to_question(store: Store, question_id: str, shown: set[int]) -> str:
    """The question's earlier children in this run other than the kernels in `shown` (those a prompt's histories
    already give), as steps: the latest and the ones that moved the fitness most, as `_side_steps_shown` keeps."""
    outcomes = store.outcomes()
    asked = [o for o in outcomes if o.question_id == question_id and o.parent_ids and o.id not in shown]
    kept = _side_steps_shown(asked, {o.id: o for o in outcomes})
    texts = _question_texts(store)
    return "\n".join(_step(store, store.individual(o.id), store.individual(o.parent_ids[0]), texts) for o in kept)


def _side_steps_shown(beside: list[Outcome], by_id: dict[int, Outcome]) -> list[Outcome]:
    """At most SIDE_STEPS_SHOWN of the line's other children, in id order: the latest half, and of the earlier
    ones those that moved the fitness most from their parent (a rejection counts as the largest loss). Keeping
    only the latest hid ideas that had lost: answerers tried them again."""
    if len(beside) <= SIDE_STEPS_SHOWN:
        return beside
    latest, earlier = beside[-(SIDE_STEPS_SHOWN // 2):], beside[:-(SIDE_STEPS_SHOWN // 2)]

    def moved(outcome: Outcome) -> float:
        parent = by_id.get(outcome.parent_ids[0])
        if outcome.status == "rejected":
            return math.inf
        if outcome.fitness and parent and parent.fitness:
            return abs(math.log(outcome.fitness / parent.fitness))
        return 0.0

    kept = sorted(earlier, key=moved, reverse=True)[:SIDE_STEPS_SHOWN - len(latest)]
    return sorted(kept, key=lambda o: o.id) + latest


def _fitness(kernel: Individual) -> str:
    if kernel.status == "correct" and kernel.fitness is not None:
        return f"{kernel.fitness:.3f}"
    if kernel.status == "rejected":
        return f"rejected ({(kernel.failure or 'no reason recorded').splitlines()[0][:160]})"
    return "not evaluated yet"


def _step(store: Store, child: Individual, parent: Individual, texts: dict[str, str]) -> str:
    """One step: `#child from #parent by operator, question, knob changes: fitness before -> after (gain)`, and
    the change its answer stated."""
    others = "".join(f" + #{other}" for other in child.parent_ids[1:])
    question = ""
    if child.question_id:
        text = texts.get(child.question_id)
        question = f', asked "{text}"' if text else f", question {child.question_id}"
    changed = [f"{name} {parent.knobs.get(name, '-')} -> {value}" for name, value in child.knobs.items()
               if parent.knobs.get(name) != value]
    knobs = (f" ({', '.join(changed[:KNOB_CHANGES_SHOWN])}" + (", ..." if len(changed) > KNOB_CHANGES_SHOWN else "")
             + ")") if changed else ""
    outcome = f"{_fitness(parent)} -> {_fitness(child)}"
    compared = child.status == parent.status == "correct" and bool(child.fitness and parent.fitness)
    if compared:
        outcome += f" ({100 * (child.fitness / parent.fitness - 1):+.1f}%{_per_scenario(child, parent)})"
    gained = compared and child.fitness > parent.fitness
    change = (stated_change(store.llm_response(child.llm_call_id), CHANGE_SHOWN_GAINED if gained else CHANGE_SHOWN)
              if child.llm_call_id else None)
    return (f"#{child.id} from #{parent.id}{others} by {child.operator}{question}{knobs}: {outcome}"
            + (f"; change: {change}" if change else ""))


def _per_scenario(child: Individual, parent: Individual) -> str:
    """A step's gain in each scenario, in the order of the results table (each kernel's speedup over its own
    check's reference times): answerers could not tell which scenarios an earlier try had helped or hurt."""
    theirs = {s["name"]: s.get("speedup") for s in (parent.report or {}).get("scenarios", [])}
    mine = [(s.get("speedup"), theirs.get(s["name"])) for s in (child.report or {}).get("scenarios", [])]
    if len(mine) < 2 or not all(a and b for a, b in mine):
        return ""
    return "; per scenario " + " ".join(f"{100 * (a / b - 1):+.1f}" for a, b in mine)


@lru_cache(maxsize=None)
def _configured_question_texts(run_dir: str) -> dict[str, str]:
    return configured_question_texts([Path(run_dir)])


def _question_texts(store: Store) -> dict[str, str]:
    """Question texts by id: the banks the run was configured with (read once per run), the questions its
    answers proposed and those people asked."""
    return {**_configured_question_texts(str(store.run_dir)),
            **{q["id"]: q["text"] for q in store.proposed_questions()},
            **{q.question_id: q.text for q in store.human_questions()}}


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
        return Context(rng=random.Random(seed), task=self.task, trigger=trigger, store=store, services=self.services,
                       question=question, answers_to=lambda question_id, shown: answers_to_question(store, question_id,
                                                                                                  shown))
