"""The search (`evokernel run`): a steady-state evolutionary loop over kernels.

`driver` is the loop itself (proposals -> evaluations -> population), with `proposing` (which operator
proposes next, proposals started and taken, the files model's answers); around it: `operator_contexts` (the
operators a config enables, their contexts, what they are told of a parent), `question_queue` (questions
people ask the running search), `answers` (answers to the `files` model's prompts), `run_dir` (the run's
directory, config, seeds and per-session meta, so that a killed run resumes), `budget` (what ends a
search), `recheck` (when a suspicious gain is measured again), `retime` (the end-of-run re-timing of the
best kernel against the seed), `interrupts` (Ctrl-C and SIGTERM) and `progress` (the live display's counts
and the summary).
Evaluations go to an `evokernel.evaluation.Evaluator` the config picks.

Interface: `Search`, `SearchStats`, `SearchResult`, `new_run_dir`, `proposal_failure_kind`.
"""

from evokernel.search.driver import Search
from evokernel.search.progress import SearchResult, SearchStats, proposal_failure_kind
from evokernel.search.run_dir import new_run_dir

__all__ = ["Search", "SearchResult", "SearchStats", "new_run_dir", "proposal_failure_kind"]
