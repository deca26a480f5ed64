"""Which question to ask: Thompson sampling on "the child beat its parent", per trigger, among the
questions that apply to the task (its device and traits: a CPU task is never asked a GPU-only question, a
task without grouped-query scenarios never one about them).

Each question has a Beta(1 + wins, 1 + losses) belief; the counts are those of earlier runs (the
prior) plus those of the live run, read from its store at every choice so the policy needs no
bookkeeping of its own and survives a resume.
"""

from __future__ import annotations

import random

from evokernel.bank.questions import Bank, Question, Subject
from evokernel.bank.payoffs import outcome_counts
from evokernel.errors import BadInput


class QuestionPolicy:
    def __init__(self, bank: Bank, prior: dict[str, tuple[int, int]] | None = None,
                 subject: Subject = Subject()) -> None:
        if not len(bank):
            raise BadInput("the question bank is empty: enable the built-in bank or add questions")
        if not any(q.applies_to(subject) for q in bank):
            raise BadInput(f"no question in the bank applies to {subject.describe()} "
                           "(see `devices` and `needs` in the bank files)")
        self.bank = bank
        self.prior = prior or {}
        self.subject = subject  # questions for other devices, or about traits the task lacks, are never asked

    def candidates(self, trigger: str, layer: str | None = None) -> list[Question]:
        """Questions allowed under `trigger` that apply to the task; the default ones when none is. With
        `layer`, only that layer's questions under `trigger` (no others stand in: they ask something else)."""
        if layer is not None:
            return [q for q in self.bank.for_trigger(trigger, self.subject) if layer in q.layers]
        return (self.bank.for_trigger(trigger, self.subject) or self.bank.for_trigger("default", self.subject)
                or [q for q in self.bank if q.applies_to(self.subject)])

    def beliefs(self, store=None) -> dict[str, tuple[int, int]]:
        """(wins, losses) per question: the prior plus the live run's outcomes."""
        live = outcome_counts(store) if store is not None else {}
        beliefs = {}
        for question_id in set(self.prior) | set(live):
            asked = self.prior.get(question_id, (0, 0))[0] + live.get(question_id, (0, 0))[0]
            wins = self.prior.get(question_id, (0, 0))[1] + live.get(question_id, (0, 0))[1]
            beliefs[question_id] = (wins, asked - wins)
        return beliefs

    def choose(self, trigger: str, rng: random.Random, store=None, layer: str | None = None,
               avoid: set[str] = frozenset()) -> Question | None:
        """Draw a success rate for each allowed question and ask the one with the highest draw (None: with
        `layer`, the bank has no question of it). Questions in `avoid` (already put about the same kernels: their
        answer would be the same) are drawn only when no other is allowed."""
        beliefs = self.beliefs(store)
        best, best_draw = None, -1.0
        candidates = self.candidates(trigger, layer)
        for question in [q for q in candidates if q.id not in avoid] or candidates:
            wins, losses = beliefs.get(question.id, (0, 0))
            draw = rng.betavariate(1 + wins, 1 + losses)
            if draw > best_draw:
                best, best_draw = question, draw
        return best
