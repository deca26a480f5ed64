"""Question operators: a child kernel is the answer to a question from the bank, asked of an LLM.

- `question-mutation`: one parent and a question chosen for the active trigger;
- `question-crossover`: two parents and a question about their difference;
- `repair`: a failing child, its compiler or verification error and a repair question, a bounded
  number of times per line.
Every operator records the question id, trigger, model and LLM call on its Proposal; an answer
that yields no kernel raises ProposalFailed with the call id (recorded, never fatal).
`build_services(config, store)` makes what they need in `Context.services`.
"""

from __future__ import annotations

import re
from pathlib import Path

from evokernel.bank import Question, QuestionPolicy, Subject, load_bank, prior_from_runs
from evokernel.config import RunConfig
from evokernel.errors import BadInput
from evokernel.harness import did_not_compile, get_task, profile_of
from evokernel.mutations import Context, Option, Parent, Proposal, ProposalFailed, register, registered_operators
from evokernel.mutations.edits import parse_answer
from evokernel.mutations.llm import LLMClient
from evokernel.mutations.prompts import crossover_prompt, mutation_prompt, repair_prompt
from evokernel.source import each_has_its_own, source_hash


def build_services(config: RunConfig, store) -> dict:
    """The LLM client (cache in the run directory unless `llm.cache_dir`), the bank and the policy."""
    bank = load_bank(config.bank.dirs, builtin=config.bank.builtin)
    task = get_task(config.task)  # no GPU-only question for a CPU task, none about traits its scenarios lack
    subject = Subject(profile_of(task.backend).device_kind, task.traits(task.scenarios(config.scenarios)))
    cache_dir = config.llm.cache_dir or (Path(store.run_dir) / "llm_cache")
    return {
        "llm": LLMClient(config.llm, store, cache_dir, config.budget.usd),
        "bank": bank,
        "policy": QuestionPolicy(bank, prior_from_runs(config.bank.stats_from), subject),
    }


class QuestionOperator:
    """Shared by the question operators: choose a question, ask, parse, describe the child."""

    name = ""
    arity = 1
    uses_llm = True

    def __init__(self, config: RunConfig | None) -> None:
        self.config = config
        self.settings = registered_operators()[self.name].settings(config)

    def _services(self, context: Context) -> tuple[LLMClient, QuestionPolicy]:
        try:
            return context.services["llm"], context.services["policy"]
        except KeyError:
            raise ProposalFailed(f"{self.name} needs an LLM: set llm.models in the config") from None

    def _answer(self, prompt: str, question: Question, trigger: str, parents: list[Parent],
                context: Context) -> Proposal:
        client, _ = self._services(context)
        answer = client.ask(prompt, context.rng, operator=self.name, question_id=question.id,
                            parent_ids=[p.id for p in parents], store=context.store,
                            parent_hashes=[source_hash(p.source) for p in parents], trigger=trigger)
        try:
            parsed = parse_answer(answer.text, parents[0].source)
        except ProposalFailed as exc:
            raise ProposalFailed(f"{self.name} ({question.id}): {exc}", answer.call_id) from None
        return Proposal(source=parsed.source, operator=self.name, parent_ids=[p.id for p in parents],
                        question_id=question.id, trigger=trigger, model=answer.model, llm_call_id=answer.call_id,
                        declared_limit=parsed.declared_limit)

    @staticmethod
    def _elsewhere(question: Question, parents: list[Parent], context: Context) -> str:
        """The question's earlier answers in this run from kernels the parents' histories do not show."""
        if context.answers_to is None:
            return ""
        shown = {p.id for p in parents} | {int(n) for p in parents for n in re.findall(r"#(\d+)", p.lineage)}
        return context.answers_to(question.id, shown)

    def _question(self, trigger: str, parents: list[Parent], context: Context) -> Question:
        """The person's question, else the policy's choice among those not yet put about these parents."""
        _, policy = self._services(context)
        if context.question is not None:
            return context.question
        asked = context.store.questions_asked_of([p.id for p in parents]) if context.store is not None else set()
        return policy.choose(trigger, context.rng, context.store, avoid=asked)


@register(default_weight=2.0)
class QuestionMutation(QuestionOperator):
    """Ask one question about one parent; the answer is the child."""

    name = "question-mutation"

    def __call__(self, parents: list[Parent], context: Context) -> Proposal:
        trigger = context.trigger or "default"
        question = self._question(trigger, parents[:1], context)
        prompt = mutation_prompt(parents[0], question, trigger, context.task,
                                 self.config.triggers.propose_questions, self._elsewhere(question, parents[:1], context))
        return self._answer(prompt, question, trigger, parents[:1], context)


@register(default_weight=0.5)
class QuestionCrossover(QuestionOperator):
    """Ask a question about the difference between two parents; the answer combines them."""

    name = "question-crossover"
    arity = 2

    @staticmethod
    def mates(first, other) -> bool:
        """A second parent with code of its own beside the first's, and the first with code the second lacks: of
        two kernels one of which holds the other whole (#190, #137 plus lines), or that differ in knob values only,
        a crossover can only give one back, and its answer is `Change: none`."""
        return each_has_its_own(first.source, other.source)

    def __call__(self, parents: list[Parent], context: Context) -> Proposal:
        if len(parents) < 2 or parents[0].source == parents[1].source:
            raise ProposalFailed("question-crossover needs two different parents")
        question = self._question("crossover", parents[:2], context)
        prompt = crossover_prompt(parents[0], parents[1], question, context.task,
                                  self.config.triggers.propose_questions, self._elsewhere(question, parents[:2], context))
        return self._answer(prompt, question, "crossover", parents[:2], context)


def failure_text(report: dict | None) -> str | None:
    """The harness's reason for rejecting a kernel, with the build log where it did not compile, and the failing
    scenarios; None if it passed (a kernel that built and then failed gets no build log here: 4,000 characters
    of ptxas lines had hidden its one-line runtime error)."""
    if not report or report.get("correct"):
        return None
    parts = [report.get("failure") or "rejected"]
    if report.get("build_log") and did_not_compile(parts[0]):
        parts.append(report["build_log"])
    parts += [f"{s['name']}: {s['error']}" for s in report.get("scenarios", []) if s.get("error")]
    return "\n".join(parts)


def repairs_so_far(store, parent_id: int) -> int:
    """Repairs already spent on this line: repair children of the parent plus repair ancestors."""
    if store is None:
        return 0
    individuals = {i.id: i for i in store.individuals()}
    children = sum(1 for i in individuals.values() if i.operator == "repair" and i.parent_ids[:1] == [parent_id])
    depth, current = 0, individuals.get(parent_id)
    while current is not None and current.operator == "repair" and current.parent_ids:
        depth += 1
        current = individuals.get(current.parent_ids[0])
    return children + depth


def parent_of(store, kernel_id: int) -> Parent | None:
    """The stored first parent of a kernel (its source, fitness and knobs), for the diff a repair prompt shows;
    None without a store, a stored kernel (a kernel given to an operator directly) or a parent."""
    if store is None:
        return None
    try:
        kernel = store.individual(kernel_id)
    except BadInput:
        return None
    if not kernel.parent_ids:
        return None
    parent = store.individual(kernel.parent_ids[0])
    return Parent(parent.id, store.source(parent), parent.fitness, dict(parent.knobs or {}))


@register(default_weight=0.5)
class Repair(QuestionOperator):
    """Ask a repair question about a kernel the harness rejected, with its error."""

    name = "repair"
    options = (Option("max_attempts", "repair attempts per failing kernel's line", 2, minimum=0, maximum=100),)

    def __call__(self, parents: list[Parent], context: Context) -> Proposal:
        failing = parents[0]
        error = failure_text(failing.report)
        if error is None:
            raise ProposalFailed(f"repair: kernel #{failing.id} did not fail (nothing to repair)")
        spent, allowed = repairs_so_far(context.store, failing.id), self.settings["max_attempts"]
        if spent >= allowed:
            raise ProposalFailed(f"repair: {spent} repairs already spent on kernel #{failing.id}'s line "
                                 f"(operators.repair.max_attempts = {allowed})")
        question = self._question("repair", parents[:1], context)
        prompt = repair_prompt(failing, question, context.task, error, parent_of(context.store, failing.id))
        return self._answer(prompt, question, "repair", parents[:1], context)
