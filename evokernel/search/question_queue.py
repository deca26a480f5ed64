"""Questions people ask a running search (`evokernel ask`), on the driver's side.

The queue (RUN/questions/, `evokernel.store.inbox`) is listed from a proposal slot at most once every
POLL_INTERVAL_S, so a person's question costs the driver one directory listing a second and nothing while
no question waits. A request found there is recorded in the run's database and its file removed; it is
then asked `times` times, before any question the policy would choose, each asking taking one LLM
proposal slot. Requests not yet asked `times` times when a session ends are asked by the next `--resume`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from evokernel.bank import Question, shape_problems
from evokernel.bank.asked_questions import HUMAN_TRIGGER, human_question_id
from evokernel.errors import BadInput
from evokernel.mutations import Parent
from evokernel.population import Population
from evokernel.search.operator_contexts import Job, parent_view
from evokernel.store import HumanQuestion, Store
from evokernel.store import inbox

POLL_INTERVAL_S = 1.0


class HumanQuestions:
    """The requests of one run that are still to be asked, and what each asking produced."""

    def __init__(self, run_dir: Path, store: Store, notify: Callable[[str], None]) -> None:
        self.run_dir, self.store, self.notify = Path(run_dir), store, notify
        self.open: dict[str, HumanQuestion] = {}  # request id -> received, not yet asked `times` times
        self.in_flight: Counter[str] = Counter()
        self.last_poll = -math.inf
        self.told_waiting = False

    def restore(self) -> None:
        """Requests an earlier session received and did not finish asking."""
        self.open = {q.id: q for q in self.store.human_questions() if q.asked < q.times}

    def poll(self) -> None:
        """Take the requests waiting in the queue into the database (at most once every POLL_INTERVAL_S)."""
        now = time.monotonic()
        if now - self.last_poll < POLL_INTERVAL_S:
            return
        self.last_poll = now
        requests, unreadable = inbox.queued(self.run_dir)
        for path in unreadable:
            self._set_aside(path, "not a question written by `evokernel ask`")
        for path, request in requests:
            request.question_id = human_question_id(request.text)
            reasons = shape_problems(request.text)
            try:
                as_question(request)
            except ValidationError as exc:
                reasons.append(str(exc.errors()[0]["msg"]))
            if reasons:  # a file written by hand, past `ask`'s checks
                self._set_aside(path, "; ".join(reasons))
                continue
            request.received_at = time.time()
            if self.store.add_human_question(request):
                self.open[request.id] = request
                self.notify(f"question {request.question_id} from {request.asked_by or 'a person'} "
                            f"(about {describe_target(request.target)}): {request.text}")
            path.unlink(missing_ok=True)

    def _set_aside(self, path: Path, why: str) -> None:
        try:
            aside = inbox.set_aside(path)
        except OSError:
            return  # renamed or removed meanwhile
        self.notify(f"{inbox.INBOX_NAME}/{path.name} is not asked ({why}): left as {aside.name}")

    def waiting(self) -> list[HumanQuestion]:
        """Requests with askings left that are not already in flight, oldest first."""
        return [q for q in self.open.values() if q.asked + self.in_flight[q.id] < q.times]

    def tell_waiting(self, why: str) -> None:
        """Say once per session why waiting requests are not asked now."""
        if self.waiting() and not self.told_waiting:
            self.told_waiting = True
            self.notify(f"{len(self.waiting())} question(s) asked by people wait: {why}")

    def started(self, request: HumanQuestion) -> Question:
        """One asking of `request` begins; returns the question to put to the model."""
        self.in_flight[request.id] += 1
        return as_question(request)

    def next_job(self, operator_name: str, population: Population, store: Store, islands: dict) -> Job | None:
        """The next asking whose target is there, as a proposal job for the question operator `operator_name`;
        an asking whose target never will be (a kernel the run lacks or rejected) is recorded as failed."""
        for request in self.waiting():
            target = _target(request, population, store, islands)
            if target is None:
                continue
            if isinstance(target, str):
                self.started(request)
                self.finished(request.id, {"failed": target})
                continue
            parent, island, generation = target
            return Job(operator_name, [parent], island, generation, HUMAN_TRIGGER, question=self.started(request),
                       request_id=request.id)
        return None

    def finished(self, request_id: str, outcome: dict) -> None:
        """Record what one asking produced ({"child": id}, {"duplicate_of": id} or {"failed": reason})."""
        self.in_flight[request_id] -= 1
        self.store.add_human_outcome(request_id, outcome)
        request = self.open.get(request_id)
        if request is not None:
            request.outcomes.append(outcome)
            if request.asked >= request.times:
                del self.open[request_id]


def _target(request: HumanQuestion, population: Population, store: Store,
            islands: dict) -> tuple[Parent, int | None, int] | str | None:
    """(parent, island, generation) for a request's target; None while it is not there yet (no best kernel),
    a reason when it never will be (a kernel the run lacks or rejected)."""
    if request.target == "best":
        best = population.best() if len(population) else None
        if best is None:
            return None
        return parent_view(store, best), islands.get(best.id), best.generation + 1
    try:
        row = store.individual(int(request.target))
    except BadInput as exc:
        return str(exc)
    if row.status in ("pending", "running"):
        return None
    if row.status != "correct":
        return f"{describe_target(request.target)} was rejected: only a correct kernel is asked about"
    return parent_view(store, row, store.source(row)), islands.get(row.id), row.generation + 1


def as_question(request: HumanQuestion) -> Question:
    """The question of a request, as the question operators take one from the bank."""
    return Question(id=request.question_id, text=request.text, triggers=["default"], layers=request.layers)


def describe_target(target: str) -> str:
    return "the best kernel" if target == "best" else f"kernel #{target}"
