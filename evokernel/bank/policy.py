"""Which question to ask: Thompson sampling on "the child beat its parent", per trigger.

Each question has a Beta(1 + wins, 1 + losses) belief; the counts are those of earlier runs (the
prior) plus those of the live run, read from its store at every choice so the policy needs no
bookkeeping of its own and survives a resume.
"""

from __future__ import annotations

import random

from evokernel.bank.questions import Bank, Question
from evokernel.bank.stats import outcome_counts
from evokernel.errors import BadInput


class QuestionPolicy:
    def __init__(self, bank: Bank, prior: dict[str, tuple[int, int]] | None = None) -> None:
        if not len(bank):
            raise BadInput("the question bank is empty: enable the built-in bank or add questions")
        self.bank = bank
        self.prior = prior or {}

    def candidates(self, trigger: str) -> list[Question]:
        """Questions allowed under `trigger`; the default ones when none is."""
        return self.bank.for_trigger(trigger) or self.bank.for_trigger("default") or list(self.bank)

    def beliefs(self, store=None) -> dict[str, tuple[int, int]]:
        """(wins, losses) per question: the prior plus the live run's outcomes."""
        live = outcome_counts(store.db) if store is not None else {}
        beliefs = {}
        for question_id in set(self.prior) | set(live):
            asked = self.prior.get(question_id, (0, 0))[0] + live.get(question_id, (0, 0))[0]
            wins = self.prior.get(question_id, (0, 0))[1] + live.get(question_id, (0, 0))[1]
            beliefs[question_id] = (wins, asked - wins)
        return beliefs

    def choose(self, trigger: str, rng: random.Random, store=None) -> Question:
        """Draw a success rate for each allowed question and ask the one with the highest draw."""
        beliefs = self.beliefs(store)
        best, best_draw = None, -1.0
        for question in self.candidates(trigger):
            wins, losses = beliefs.get(question.id, (0, 0))
            draw = rng.betavariate(1 + wins, 1 + losses)
            if draw > best_draw:
                best, best_draw = question, draw
        return best
