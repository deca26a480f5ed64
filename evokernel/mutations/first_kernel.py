"""A task's first kernel written by a model from the task's reference, for a task that has none: the model is
asked a question of the bank's `reference` layer with the reference and the contract, the harness checks the
kernel, and a rejected kernel goes back to the model with the reason, a bounded number of times.

One flow, two callers: `evokernel task new --model` (`write_first_kernel`, checked on the task's quick
scenarios before the task directory is written) and the search's `first-kernel` operator (`ask_first_kernel`,
one answer per proposal; the search's evaluation is the check, and a rejected kernel is the next proposal's
parent)."""

from __future__ import annotations

import random
from collections.abc import Callable

from evokernel.bank import Question, QuestionPolicy, Subject, load_bank
from evokernel.config import LLMConfig
from evokernel.errors import BadInput
from evokernel.harness import Task, profile_of
from evokernel.mutations import ProposalFailed
from evokernel.mutations.edits import parse_answer
from evokernel.mutations.llm import Answer, LLMClient, is_files
from evokernel.mutations.prompts import first_kernel_prompt

FIRST_KERNEL = "first-kernel"  # the operator, and the trigger its questions are asked under
REFERENCE_LAYER = "reference"  # the bank's layer of questions about writing a kernel from the reference


def reference_source(task: Task) -> str:
    """What the kernel must compute, as the model reads it: the PyTorch module the task was made from, else the
    task's own task.py."""
    return task.reference_source() or (task.directory / "task.py").read_text(errors="replace")


def first_kernel_question(policy: QuestionPolicy, rng: random.Random, store=None) -> Question:
    """A question of the `reference` layer (the policy's choice); ProposalFailed when the bank holds none."""
    question = policy.choose(FIRST_KERNEL, rng, store, layer=REFERENCE_LAYER)
    if question is None:
        raise ProposalFailed(f"{FIRST_KERNEL}: the bank has no question of layer '{REFERENCE_LAYER}' "
                             f"under trigger '{FIRST_KERNEL}'")
    return question


def ask_first_kernel(client: LLMClient, task: Task, question: Question, reference: str, rng: random.Random,
                     previous: str | None = None, error: str | None = None, **record) -> tuple[str, Answer]:
    """One answer (`previous` and its `error`: the rejected kernel to fix) and the kernel it holds; ProposalFailed
    naming the LLM call when it holds none. `record`: what `LLMClient.ask` records with the call."""
    answer = client.ask(first_kernel_prompt(task, question, reference, previous, error), rng, operator=FIRST_KERNEL,
                        question_id=question.id, trigger=FIRST_KERNEL, **record)
    try:
        return parse_answer(answer.text, previous or "", may_keep_parent=False).source, answer
    except ProposalFailed as exc:
        raise ProposalFailed(f"the answer holds no kernel: {exc}", answer.call_id) from None


def write_first_kernel(task: Task, module_source: str, llm: LLMConfig, attempts: int,
                       check: Callable[[str], str | None], say: Callable[[str], None] = lambda line: None) -> str:
    """A kernel that passes `check` (None: correct; else why not), from the model in `llm`; BadInput after
    `attempts` answers without a correct kernel."""
    if any(is_files(model.model) for model in llm.models):
        raise BadInput("--model files: its answers come within a run; give --seed-kernel FILE or another model")
    client = LLMClient(llm)
    rng = random.Random(0)
    policy = QuestionPolicy(load_bank(), subject=Subject(profile_of(task.backend).device_kind,
                                                         task.traits(task.scenarios("all"))))
    question = first_kernel_question(policy, rng)
    previous = error = None
    for attempt in range(1, attempts + 1):
        try:
            previous, _ = ask_first_kernel(client, task, question, module_source, rng, previous, error)
        except ProposalFailed as exc:
            error = str(exc)
        else:
            error = check(previous)
        say(f"attempt {attempt}: " + ("correct" if error is None else f"rejected: {error.splitlines()[0]}"))
        if error is None:
            return previous
    raise BadInput(f"--model {llm.models[0].model}: no correct first kernel in {attempts} attempts "
                   f"(last: {error.splitlines()[0]})")
