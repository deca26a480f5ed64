"""Steering a search from outside it: asking it a question and answering a prompt of the `files` model.

The command line (`evokernel ask`, `evokernel answer`) and the web page (`evokernel serve`) both call these, so an
action lands in the same place whichever way it was given: a file dropped in the run directory that the driver
takes (`evokernel.store.inbox`, `evokernel.store.prompt_box`). Nothing here opens the run's database for writing,
and input that is refused (a question the lint rejects, a prompt already answered) writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.lineage import Lineage
from evokernel.store import driver_running, inbox, prompt_box


@dataclass(frozen=True)
class Receipt:
    """What an action left in the run directory, and what to tell the person who gave it."""

    id: str
    path: Path
    message: str
    notes: list[str] = field(default_factory=list)


def queue_question(run_dir: Path, text: str, target: str = "best", times: str | int = "1",
                   layers: list[str] | tuple[str, ...] = ()) -> Receipt:
    """Queue a person's question for the run's driver, after the bank's lint and a check of its target (a correct
    kernel of the run, or 'best'); BadInput says why it is refused."""
    from evokernel.bank.asked_questions import MAX_TIMES, make_request
    from evokernel.search.question_queue import describe_target

    with Lineage(run_dir) as lin:
        if not str(times).strip().isdigit():
            raise BadInput(f"--times '{times}': expected a whole number from 1 to {MAX_TIMES}")
        request = make_request(text, target, int(times), list(layers))
        if request.target != "best":
            kernel = lin.get(int(request.target))
            if kernel.status != "correct":
                raise BadInput(f"kernel #{kernel.id} of run {lin.name} is {kernel.status}: ask about a correct "
                               "kernel (or --target best)")
        meta = lin.store.meta()
    try:
        path = inbox.post(run_dir, request)
    except OSError as exc:
        raise BadInput(f"cannot queue the question in {run_dir / inbox.INBOX_NAME}: {exc.strerror or exc}") from None
    when = ("the driver asks it at its next free proposal slot" if meta.get("status") == "running"
            else f"the run is {meta.get('status', 'not running')}: it is asked when the run is resumed "
                 f"(evokernel run --resume {run_dir})")
    notes = ([] if ((meta.get("config") or {}).get("llm") or {}).get("models")
             else ["note: the run's config names no model: resume it with --model to have the question asked"])
    return Receipt(request.id, path, f"queued {request.id}: question {request.question_id} about "
                                     f"{describe_target(request.target)}, {request.times} time(s); {when}",
                   notes)


def answer_prompt(run_dir: Path, prompt_id: str, text: str, answered_by: str | None = None,
                  source: str = "the answer") -> Receipt:
    """Give an open prompt of the `files` model its answer, once it parses against the prompt's kernel (a whole
    kernel in a fenced block, or SEARCH/REPLACE edits); `source` names where the text came from in errors."""
    from evokernel.mutations import ProposalFailed
    from evokernel.mutations.edits import parse_answer

    if not text.strip():
        raise BadInput(f"{source}: the answer is empty")
    with Lineage(run_dir) as lin:
        prompt = lin.store.prompt(prompt_id) if prompt_box.PROMPT_ID.match(prompt_id) else None
        if prompt is None:
            raise BadInput(f"{prompt_id} is not a prompt of run {lin.name} (its open prompts: evokernel prompts "
                           f"{lin.run_dir})")
        if prompt.status != "open":
            raise BadInput(f"prompt {prompt_id} of run {lin.name} is {prompt.status} already")
        if prompt_box.answer_path(lin.run_dir, prompt_id).exists():
            raise BadInput(f"prompt {prompt_id} already has an answer ({prompt_box.answer_path(lin.run_dir, prompt_id)})")
        parent = lin.store.individual(prompt.parent_ids[0])
        try:
            parse_answer(text, lin.store.source(parent))
        except ProposalFailed as exc:
            raise BadInput(f"{source}: {exc} (an answer is a whole kernel in a fenced block, or SEARCH/REPLACE "
                           "edits of the prompt's kernel; one that changes nothing says so plainly, e.g. 'it cannot be "
                           "made faster')") from None
    try:
        path = prompt_box.write_answer(run_dir, prompt_id, text, answered_by)
    except OSError as exc:
        raise BadInput(f"cannot write the answer in {run_dir / prompt_box.ANSWERS_DIR}: {exc.strerror or exc}") from None
    when = ("the driver takes it within seconds" if driver_running(run_dir)
            else f"the run is not running: it is taken at evokernel run --resume {run_dir}")
    return Receipt(prompt_id, path, f"answer to {prompt_id} written to {path}; {when}")
