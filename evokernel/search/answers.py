"""Answers to the `files` model's prompts, on the driver's side: taken into the run as they arrive.

A question put to the `files` model is written as RUN/prompts/ID.md and recorded as an open prompt
(`evokernel.mutations.llm`); the search goes on meanwhile. The driver lists RUN/answers/ at most once every
POLL_INTERVAL_S; an answer to an open prompt is parsed against the prompt's first parent like any model's
answer, recorded as the LLM call it answers, and turned into a child (or a recorded failure) in the same
transaction that closes the prompt, so an answer is used once, also across a killed driver. An answer file
for no prompt of this run is set aside (renamed `.unused`) and reported once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from evokernel.mutations import Proposal, ProposalFailed
from evokernel.mutations.edits import parse_answer
from evokernel.search.operator_contexts import Job, parent_view
from evokernel.store import OpenPrompt, Store, prompt_box

POLL_INTERVAL_S = 1.0


@dataclass
class GivenAnswer:
    """An answer file found for an open prompt: its text, or why it cannot be read."""

    prompt: OpenPrompt
    text: str | None
    answered_by: str | None
    unreadable: str | None = None


class FileAnswers:
    """The open prompts of one run and the answers given to them."""

    def __init__(self, run_dir: Path, store: Store, notify: Callable[[str], None]) -> None:
        self.run_dir, self.store, self.notify = Path(run_dir), store, notify
        self.last_poll = -math.inf
        self.poll_interval_s = POLL_INTERVAL_S

    def restore(self) -> None:
        """Rewrite the file of an open prompt whose writer was killed between its row and its file."""
        for prompt in self.store.prompts("open"):
            if not prompt_box.prompt_path(self.run_dir, prompt.id).is_file():
                prompt_box.write_prompt(self.run_dir, prompt)

    def poll(self) -> list[GivenAnswer]:
        """Answers given to open prompts since the last look (at most once every POLL_INTERVAL_S)."""
        now = time.monotonic()
        if now - self.last_poll < self.poll_interval_s:
            return []
        self.last_poll = now
        files = prompt_box.answer_files(self.run_dir)
        if not files:
            return []
        statuses = self.store.prompt_statuses()
        given = []
        for prompt_id, path in sorted(files.items()):
            if prompt_id not in statuses:
                self._set_aside(path)
            elif statuses[prompt_id] == "open":
                given.append(self._read(self.store.prompt(prompt_id), path))
        return given

    def _read(self, prompt: OpenPrompt, path: Path) -> GivenAnswer:
        try:
            text, answered_by = prompt_box.read_answer(path)
        except UnicodeDecodeError:
            return GivenAnswer(prompt, None, None, "answer not UTF-8")
        except OSError as exc:
            return GivenAnswer(prompt, None, None, f"answer unreadable ({exc.strerror or exc})")
        return GivenAnswer(prompt, text, answered_by)

    def _set_aside(self, path: Path) -> None:
        try:
            aside = prompt_box.set_aside(path)
        except OSError:
            return  # renamed or removed meanwhile
        self.notify(f"{prompt_box.ANSWERS_DIR}/{path.name} answers no prompt of this run: left as {aside.name}")

    def job(self, prompt: OpenPrompt) -> Job:
        """The proposal job the prompt was written for (its child's generation from the parents)."""
        rows = [self.store.individual(parent_id) for parent_id in prompt.parent_ids]
        return Job(prompt.operator, [parent_view(self.store, row, self.store.source(row)) for row in rows], None,
                   1 + max((row.generation for row in rows), default=0), prompt.trigger or "default")

    def outcome(self, answer: GivenAnswer, client) -> Proposal | ProposalFailed:
        """The child the answer describes, or why it describes none; the answer is recorded as an LLM call
        (`client`: the run's LLMClient) when it could be read."""
        prompt = answer.prompt
        if answer.text is None:
            return ProposalFailed(f"{prompt.operator} ({prompt.question_id}): {answer.unreadable}")
        call_id = client.record_answer(prompt, answer.text, answer.answered_by, self.store)
        parent = self.store.individual(prompt.parent_ids[0])
        try:
            parsed = parse_answer(answer.text, self.store.source(parent))
        except ProposalFailed as exc:
            return ProposalFailed(f"{prompt.operator} ({prompt.question_id}): {exc}", call_id)
        model = "files" + (f" ({answer.answered_by})" if answer.answered_by else "")
        return Proposal(source=parsed.source, operator=prompt.operator, parent_ids=list(prompt.parent_ids),
                        question_id=prompt.question_id, trigger=prompt.trigger, model=model, llm_call_id=call_id,
                        declared_limit=parsed.declared_limit)
