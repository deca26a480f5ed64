"""The question bank: questions (YAML), lint, when to ask (triggers), which to ask (policy), what paid (payoffs).

Interface used by the search, the operators and the CLI:
- `load_bank(dirs, builtin=True) -> Bank`; `Bank.for_trigger(trigger, subject)`, `Bank.get(id)`; `Question`
  (id, text, triggers, layers, devices, needs, notes); `Subject(device, traits)`: what questions are
  asked about; `question_text(id)` (built-in bank lookup, LookupError if unknown).
- `lint_questions(questions, files) -> list[Problem]`; `shape_problems(text)`; `duplicate_problems(text, others)`;
  `admit_question(dir, text, triggers, layers, id, notes, devices=..., needs=...)` writes a question to a user
  bank after the lint.
- `QuestionPolicy(bank, prior, subject)`: `choose(trigger, rng, store) -> Question`, Thompson sampling on
  "child beat its parent", counts from the live run's store plus `prior` (`prior_from_runs(config.bank.stats_from)`).
- `configured_question_texts(run_dirs)`: the texts of the questions in the banks those runs were configured
  with. The bank reads runs only through `evokernel.store`; per-question statistics over runs are
  `evokernel.lineage.statistics.questions_over_runs`.
- `TriggerMonitor(config.triggers, store)`: the search calls `observe(child_id, parent_fitness, child_fitness,
  proposal)` after every evaluation (returns the events fired: stagnation, declared-limit, suspicious-gain;
  records each with `store.add_trigger_event`; stores a question the LLM proposed when its child beat the
  parent), `declared_limit(proposal)` for a proposal that declared a limit and was not evaluated, and
  `active()` before each LLM proposal (the trigger to put in `Context.trigger`; one-shot events are consumed).
- `gain_ratio(parent_fitness, child_fitness)`: the child's fitness over its parent's (the suspicious-gain trigger;
  the search's re-check policy, `evokernel.search.recheck`, reads it too).
- `parse_proposed_question(answer)`, `review_proposed(store, id, accept, bank_dir, layers)`, `PROPOSAL_FORMAT`:
  LLM-proposed questions are stored as `proposed` and join a bank only when accepted (`evokernel bank review`).
"""

from __future__ import annotations

from functools import lru_cache

from evokernel.bank.admit import admit_question
from evokernel.bank.lint import Problem, duplicate_problems, lint_questions, shape_problems
from evokernel.bank.policy import QuestionPolicy
from evokernel.bank.proposed_questions import PROPOSAL_FORMAT, parse_proposed_question, review_proposed
from evokernel.bank.payoffs import configured_question_texts, prior_from_runs
from evokernel.bank.questions import LAYERS, TRIGGERS, Bank, Question, Subject, load_bank, write_question
from evokernel.bank.triggers import TriggerMonitor, gain_ratio


@lru_cache(maxsize=1)
def _builtin() -> Bank:
    return load_bank()


def question_text(question_id: str) -> str:
    """Text of a built-in question (for reports); LookupError if the built-in bank has no such id."""
    if question_id not in _builtin().questions:
        raise LookupError(question_id)
    return _builtin().questions[question_id].text


__all__ = ["LAYERS", "PROPOSAL_FORMAT", "TRIGGERS", "Bank", "Problem", "Question", "QuestionPolicy", "Subject",
           "TriggerMonitor", "admit_question", "configured_question_texts", "duplicate_problems", "lint_questions",
           "gain_ratio", "load_bank", "parse_proposed_question", "prior_from_runs", "question_text", "review_proposed",
           "shape_problems", "write_question"]
