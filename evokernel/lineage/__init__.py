"""Read-only queries over a run's lineage store: where a kernel came from and what paid off.

Everything here only reads, so it works on a run that is still being written and on a run copied
to another machine. Modules: `view` (`Lineage`: kernels, sources, parents, ancestries, trees; `Step`,
`TreeNode`), `compare` (per-scenario verdicts, `ScenarioDelta`, the re-timing of the best kernel),
`statistics` (questions, failures, cost, progress, run summaries, `find_runs`), `export` (tables), `documents`
(the JSON of the `--json` commands and of the web page).
"""

from evokernel.lineage.compare import MIN_NOISE, ScenarioDelta, compare_scenarios, describe_retime, retime_record
from evokernel.lineage.statistics import RunSummary, find_runs
from evokernel.lineage.view import Lineage, Step, TreeNode

__all__ = ["MIN_NOISE", "Lineage", "RunSummary", "ScenarioDelta", "Step", "TreeNode", "compare_scenarios",
           "describe_retime", "find_runs", "retime_record"]
