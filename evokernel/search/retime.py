"""The end-of-run re-timing of the best kernel against the seed it is compared with, with more rounds
than a search evaluation: the summary, `lineage` and the report then say whether its gain stands above
the noise (`evokernel.lineage.retime_record` gives the verdict)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from evokernel.evaluation import Evaluator
from evokernel.harness import CheckOptions, Task, profile_of
from evokernel.store import Store

RETIME_ROUND_FACTOR = 3  # the best kernel is re-timed against the seed with this many times the usual rounds
RETIME_KEY = "best_recheck"  # meta entry of that re-timing (see lineage.retime_record)
POLL_S = 1.0


def retime_best(store: Store, evaluator: Evaluator, task: Task, options: CheckOptions, seed_id: int | None,
                announce: Callable[[str], None]) -> str | None:
    """Re-time the best kernel, when it is not a seed, against the seed (once per pair of kernels, also
    across sessions) and record it in the meta; returns the line that says the outcome, None when there was
    nothing to re-time. Replayed evaluations are not re-timed: they measure nothing now."""
    best = store.best(1)
    if not evaluator.measures or not best or best[0].operator == "seed" or best[0].id == seed_id or seed_id is None:
        return None
    best, seed = best[0], store.individual(seed_id)
    earlier = store.meta().get(RETIME_KEY)
    if earlier and (earlier.get("id"), earlier.get("seed_id")) == (best.id, seed.id):
        return None  # re-timed in an earlier session
    from evokernel.lineage import retime_record

    rounds = RETIME_ROUND_FACTOR * profile_of(task.backend).rounds
    reference = store.source_path(seed.source_hash, seed.language).resolve()
    options = dataclasses.replace(options, speed_reference=str(reference), rounds=rounds, seed=None,
                                  reference_reuse_s=None)
    announce(f"re-timing the best kernel #{best.id} against the seed #{seed.id} ({rounds} rounds)")
    evaluator.submit(("retime", best.id), store.source(best), f"individual {best.id} against seed {seed.id}", options)
    finished = []
    while not finished:
        finished = evaluator.wait(POLL_S)
    record = retime_record(finished[0].report, best, seed, rounds)
    store.set_meta(RETIME_KEY, record)
    return f"#{best.id} re-timed against seed #{seed.id}: {record['geomean'] or 0:.3f}x, {record['verdict']}"
