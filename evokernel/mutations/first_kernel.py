"""A task's first kernel written by a model, for a task made from a PyTorch module without one
(`evokernel task new --model`): the model is asked for the kernel, the harness checks it on the task's quick
scenarios, and a rejected kernel goes back to the model with the reason, a bounded number of times."""

from __future__ import annotations

import random
from collections.abc import Callable

from evokernel.config import LLMConfig
from evokernel.errors import BadInput
from evokernel.harness import Task
from evokernel.mutations import ProposalFailed
from evokernel.mutations.edits import parse_answer
from evokernel.mutations.llm import LLMClient, is_files
from evokernel.mutations.prompts import first_kernel_prompt


def write_first_kernel(task: Task, module_source: str, llm: LLMConfig, attempts: int,
                       check: Callable[[str], str | None], say: Callable[[str], None] = lambda line: None) -> str:
    """A kernel that passes `check` (None: correct; else why not), from the model in `llm`; BadInput after
    `attempts` answers without a correct kernel."""
    if any(is_files(model.model) for model in llm.models):
        raise BadInput("--model files: its answers come within a run; give --seed-kernel FILE or another model")
    client = LLMClient(llm)
    rng = random.Random(0)
    previous = error = None
    for attempt in range(1, attempts + 1):
        answer = client.ask(first_kernel_prompt(task, module_source, previous, error), rng, operator="first-kernel")
        try:
            source = parse_answer(answer.text, previous or "").source
        except ProposalFailed as exc:
            error = f"the answer holds no kernel: {exc}"
        else:
            previous, error = source, check(source)
        say(f"attempt {attempt}: " + ("correct" if error is None else f"rejected: {error.splitlines()[0]}"))
        if error is None:
            return previous
    raise BadInput(f"--model {llm.models[0].model}: no correct first kernel in {attempts} attempts "
                   f"(last: {error.splitlines()[0]})")
