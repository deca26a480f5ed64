"""The question bank: questions (YAML), lint, when to ask (triggers), which to ask (policy), what paid (stats).

Interface used by the search and the operators:
- `load_bank(dirs, builtin=True) -> Bank`; `Bank.for_trigger(trigger)`; `Question` (id, text, triggers, layers).
- `lint_questions(questions, files) -> list[Problem]`; `shape_problems(text)`; `duplicate_problems(text, others)`.
- `QuestionPolicy(bank, prior)`: `choose(trigger, rng, store) -> Question`, Thompson sampling on
  "child beat its parent", counts taken from the live run's store plus `prior` (`prior_from_runs(dirs)`).
- `question_stats(run_dirs) -> pandas.DataFrame` per question: asked, children, correct, better, mean_gain.
- `TriggerMonitor(config.triggers, store=None)`: the search calls `observe(child_id, parent_fitness,
  child_fitness, proposal)` after every evaluation (returns the events fired, records each in the store,
  and harvests a question the LLM proposed when the child beat its parent) and `active()` before each
  LLM proposal (the trigger to ask under; one-shot events are consumed).
- `needs_recheck(parent_fitness, child_fitness, report, config.triggers)` and `recheck_options(options,
  config.triggers, rng)`: a suspicious gain is re-checked with more trials and a fresh seed before it
  may become the best.
- `parse_proposed_question(answer)`, `accept_proposed(store, id, bank_dir)`: LLM-proposed questions join
  a bank only when accepted (`evokernel bank review`).
"""

from evokernel.bank.admit import admit_question
from evokernel.bank.lint import Problem, duplicate_problems, lint_questions, shape_problems
from evokernel.bank.questions import LAYERS, TRIGGERS, Bank, Question, load_bank, write_question

__all__ = ["LAYERS", "TRIGGERS", "Bank", "Problem", "Question", "admit_question", "duplicate_problems", "lint_questions",
           "load_bank", "shape_problems", "write_question"]
