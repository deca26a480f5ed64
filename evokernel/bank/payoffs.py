"""Which questions paid: the bandit's (asked, beat-parent) counts, from a live run's store or summed over
earlier runs, and the texts of the questions in the banks runs were configured with.

Runs are read only through `evokernel.store`; the per-question statistics shown to people
(`evokernel bank stats`) are `evokernel.lineage.statistics.questions_over_runs`.
"""

from __future__ import annotations

from pathlib import Path

from evokernel.errors import BadInput, read_yaml
from evokernel.store import Outcome, Store, open_readonly


def configured_question_texts(run_dirs: list[Path]) -> dict[str, str]:
    """Question texts from the banks the runs were configured with (user banks that still exist)."""
    from evokernel.bank.questions import load_bank

    texts: dict[str, str] = {}
    for run_dir in run_dirs:
        config_path = Path(run_dir) / "config.yaml"
        config = read_yaml(config_path) if config_path.is_file() else None  # BadInput naming it when unreadable
        bank = (config or {}).get("bank") or {}
        dirs = [Path(d) for d in bank.get("dirs", []) if Path(d).is_dir()]
        try:
            texts.update({q.id: q.text for q in load_bank(dirs, builtin=bank.get("builtin", True))})
        except BadInput:  # a bank changed since the run: show the ids without text
            continue
    return texts


def outcome_counts(store: Store) -> dict[str, tuple[int, int]]:
    """Per question in one run's store: (times asked, children that beat their best parent). Asked: evaluated
    children, and answers that gave no kernel (`Change: none`, a known kernel again): a question whose answers
    change nothing loses, as `bank stats` counts it. Pending children are not counted yet."""
    outcomes = store.outcomes()
    fitness = {outcome.id: outcome.fitness for outcome in outcomes}
    counts: dict[str, list[int]] = {q: [n, 0] for q, n in store.childless_answers().items()}
    for child in outcomes:
        if not child.question_id or child.status not in ("correct", "rejected"):
            continue
        entry = counts.setdefault(child.question_id, [0, 0])
        entry[0] += 1
        entry[1] += beats_parents(child, fitness)
    return {q: (asked, wins) for q, (asked, wins) in counts.items()}


def beats_parents(child: Outcome, fitness: dict[int, float | None]) -> bool:
    """Whether a child is correct and faster than the best of its parents whose fitness is known (`fitness`:
    every kernel's, by id)."""
    known = [fitness[p] for p in child.parent_ids if fitness.get(p) is not None]
    return child.status == "correct" and child.fitness is not None and bool(known) and child.fitness > max(known)


def prior_from_runs(run_dirs: list[Path]) -> dict[str, tuple[int, int]]:
    """Summed outcome counts of earlier runs: the bandit's prior."""
    prior: dict[str, tuple[int, int]] = {}
    for run_dir in run_dirs:
        with open_readonly(Path(run_dir)) as store:
            for question_id, (asked, wins) in outcome_counts(store).items():
                old = prior.get(question_id, (0, 0))
                prior[question_id] = (old[0] + asked, old[1] + wins)
    return prior
