"""Questions a person asks a running search (`evokernel ask`): the same lint as the bank's questions before
one is queued, an id shared by every asking of the same text, and the ones whose children beat their
parents offered for a bank (`evokernel bank review`), beside the questions the model proposed."""

from __future__ import annotations

import getpass
import hashlib
import socket
import time

from evokernel.bank.lint import shape_problems
from evokernel.bank.questions import LAYERS, slug
from evokernel.bank.payoffs import beats_parents
from evokernel.errors import BadInput
from evokernel.store import HumanQuestion, Store
from evokernel.store.inbox import new_request_id

HUMAN_TRIGGER = "human"  # the trigger recorded on children of a person's question (never a bank trigger)
ID_PREFIX = "human-"
MAX_TIMES = 20


def human_question_id(text: str) -> str:
    """The same text gets the same id in every run, so `bank stats` adds its askings up across runs."""
    return f"{ID_PREFIX}{slug(text, 4)[:40]}-{hashlib.sha256(text.encode()).hexdigest()[:4]}"


def make_request(text: str, target: str, times: int, layers: list[str]) -> HumanQuestion:
    """A checked request: the question passes the bank's lint (else BadInput with the reasons), the target
    is `best` or a kernel id, `times` is from 1 to MAX_TIMES, layers are the bank's."""
    text = " ".join(text.split())
    reasons = shape_problems(text)
    if reasons:
        raise BadInput("question refused: " + "; ".join(reasons))
    if target != "best" and not target.isdigit():
        raise BadInput(f"--target '{target}': expected 'best' or a kernel id")
    if not 1 <= times <= MAX_TIMES:
        raise BadInput(f"--times {times}: expected 1 to {MAX_TIMES}")
    for layer in layers:
        if layer not in LAYERS:
            raise BadInput(f"--layer '{layer}': expected one of {', '.join(LAYERS)}")
    asked_at = time.time()
    return HumanQuestion(id=new_request_id(asked_at), question_id=human_question_id(text), text=text,
                         target=str(int(target)) if target != "best" else target, times=times, asked_at=asked_at,
                         asked_by=_who(), layers=list(layers))


def _who() -> str:
    """user@host of the person asking (the host alone where the user has no name, as in some containers)."""
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        return socket.gethostname()


def improving_children(store: Store) -> dict[str, list[int]]:
    """Per human question id: its children that beat their best parent."""
    outcomes = store.outcomes()
    fitness = {outcome.id: outcome.fitness for outcome in outcomes}
    found: dict[str, list[int]] = {}
    for child in outcomes:
        if (child.question_id or "").startswith(ID_PREFIX) and beats_parents(child, fitness):
            found.setdefault(child.question_id, []).append(child.id)
    return found


def reviewable_human_questions(store: Store) -> list[dict]:
    """Human questions whose children beat their parents, as rows like the model-proposed questions'
    (id, text, triggers, layers, status, from_individual, created_at) with `by` = 'person'."""
    improved = improving_children(store)
    rows: dict[str, dict] = {}
    for question in store.human_questions():
        if question.question_id in improved and question.question_id not in rows:
            rows[question.question_id] = {
                "id": question.question_id, "text": question.text, "triggers": ["default"],
                "layers": question.layers, "status": "proposed", "from_individual": improved[question.question_id][0],
                "created_at": question.asked_at, "by": "person"}
    return list(rows.values())
