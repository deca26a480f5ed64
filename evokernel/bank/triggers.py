"""When to ask which kind of question: stagnation, a declared limit, a suspiciously large gain.

The search calls `TriggerMonitor.observe` after every evaluation and `TriggerMonitor.active` before
every LLM proposal. A suspicious gain is also a measurement problem, which the search handles
(`evokernel.search.recheck`).
"""

from __future__ import annotations

from evokernel.bank.proposed_questions import harvest_proposed_question
from evokernel.config import TriggerConfig

ONE_SHOT = ("suspicious-gain", "declared-limit")  # in priority order; each firing is used by one question


def gain_ratio(parent_fitness: float | None, child_fitness: float | None) -> float | None:
    if not parent_fitness or child_fitness is None or parent_fitness <= 0:
        return None
    return child_fitness / parent_fitness


class TriggerMonitor:
    """Watches evaluations and says under which trigger the next question is asked."""

    def __init__(self, config: TriggerConfig, store=None) -> None:
        self.config = config
        self.store = store
        self.best: float | None = None
        self.since_best = 0
        self.evaluations = 0
        self.pending: list[str] = []

    def observe(self, child_id: int | None, parent_fitness: float | None, child_fitness: float | None,
                proposal=None) -> list[str]:
        """Account for one finished evaluation; returns the events it fired (each recorded in the store)."""
        self.evaluations += 1
        events = []
        if child_fitness is not None and (self.best is None or child_fitness > self.best):
            self.best, self.since_best = child_fitness, 0
        else:
            self.since_best += 1
            if self.since_best % self.config.stagnation_evaluations == 0:
                events.append(("stagnation", f"best {self.best} not improved for {self.since_best} evaluations"))
        if proposal is not None and getattr(proposal, "declared_limit", False):
            events.append(self._declared(proposal))
        ratio = gain_ratio(parent_fitness, child_fitness)
        if ratio is not None and ratio >= self.config.suspicious_gain:
            events.append(("suspicious-gain", f"child/parent speedup {ratio:.2f} >= {self.config.suspicious_gain}"))
        self._fire(events, child_id)
        if (self.store is not None and self.config.propose_questions and ratio is not None and ratio > 1
                and proposal is not None and getattr(proposal, "llm_call_id", None) is not None):
            harvest_proposed_question(self.store, proposal.llm_call_id, child_id)
        return [kind for kind, _ in events]

    def declared_limit(self, proposal, child_id: int | None = None) -> None:
        """A proposal that declared a limit but was not evaluated (e.g. it returned its parent unchanged)."""
        self._fire([self._declared(proposal)], child_id)

    @staticmethod
    def _declared(proposal) -> tuple[str, str]:
        return "declared-limit", f"answer of LLM call {proposal.llm_call_id} declared a limit or changed nothing"

    def _fire(self, events: list[tuple[str, str]], child_id: int | None) -> None:
        for kind, detail in events:
            if kind in ONE_SHOT and kind not in self.pending:
                self.pending.append(kind)
            if self.store is not None:
                self.store.add_trigger_event(self.evaluations, kind, child_id, detail)

    def active(self) -> str:
        """The trigger for the next question; consumes a pending one-shot event."""
        for kind in ONE_SHOT:
            if kind in self.pending:
                self.pending.remove(kind)
                return kind
        if self.since_best >= self.config.stagnation_evaluations:
            return "stagnation"
        return "default"
