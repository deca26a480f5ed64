"""A run as JSON documents: what `lineage`, `show`, `ask --list` and `prompts` print with `--json`, and what the
web page (`evokernel serve`) reads, built in one place so that the two never disagree."""

from __future__ import annotations

from dataclasses import asdict

from evokernel.errors import BadInput
from evokernel.lineage.compare import ScenarioDelta
from evokernel.lineage.view import Lineage, Step, TreeNode
from evokernel.store import kernel_notes


def ratio(before: float | None, after: float | None) -> float | None:
    """The relative gain from `before` to `after` (0.1 is 10% faster); None where either is unknown."""
    return after / before - 1 if before and after else None


def select_trees(lin: Lineage, kernel_id: int | None = None, best: bool = False,
                 top: int | None = None) -> tuple[list[TreeNode], set[int]]:
    """The descendant trees `lineage --tree` draws and the kernels it stars: of every seed (the whole run), of
    one kernel, or only the paths to the best (or `top` best) kernels."""
    if kernel_id is not None:
        return [lin.descendants(lin.get(kernel_id).id)], {kernel_id}
    if best or top:
        chosen = lin.top(top) if top else [lin.best()]
        if not chosen:
            raise BadInput(f"run {lin.name} has no correct kernel yet")
        stars = {t.id for t in chosen}
        keep = set().union(*(lin.ancestors(t) for t in stars))
        return [lin.descendants(root, keep) for root in lin.roots(keep)], stars
    roots = [i for i, ind in lin.individuals.items() if not any(p in lin.individuals for p in ind.parent_ids)]
    return [lin.descendants(root) for root in roots], {t.id for t in lin.top(1)}


def tree_document(lin: Lineage, node: TreeNode, parent, stars: set[int]) -> dict:
    """A tree of `lineage --tree --json`: each kernel with its gain over the parent it is drawn under."""
    ind = node.individual
    return {"id": ind.id, "operator": ind.operator, "question_id": ind.question_id, "status": ind.status,
            "fitness": ind.fitness, "parent": parent.id if parent else None,
            "gain": ratio(parent.fitness if parent else None, ind.fitness if ind.status == "correct" else None),
            "failure": lin.failure(ind.id), "best": ind.id in stars, "shown_above": node.repeat,
            "children": [tree_document(lin, child, ind, stars) for child in node.children]}


def step_document(lin: Lineage, step: Step) -> dict:
    """One step of an ancestry (`lineage --json`): the kernel, its parent, the question and what changed."""
    ind, parent = step.individual, step.parent
    return {"id": ind.id, "operator": ind.operator, "parent": parent.id if parent else None,
            "other_parents": step.other_parents, "question_id": ind.question_id, "question_text": step.question_text,
            "asked_by_person": lin.asked_by_person(ind.question_id), "trigger": ind.trigger, "model": ind.model,
            "status": ind.status, "fitness": ind.fitness, "parent_fitness": parent.fitness if parent else None,
            "gain": ratio(parent.fitness if parent else None, ind.fitness if ind.status == "correct" else None),
            "wins": step.wins, "losses": step.losses, "ties": step.ties, "failure": lin.failure(ind.id)}


def delta_document(d: ScenarioDelta) -> dict:
    return {"scenario": d.name, "before": d.before, "after": d.after, "ratio": d.ratio, "noise": d.noise,
            "verdict": d.verdict}


def kernel_document(lin: Lineage, kernel_id: int) -> dict:
    """Everything about one kernel (`show --json`): source, diffs against its parents, per-scenario results,
    build log, the LLM exchange that produced it, the notes put on it (`evokernel note`)."""
    ind = lin.get(kernel_id)
    parents = lin.parents(ind.id)
    return {
        "run": lin.name, "id": ind.id, "operator": ind.operator, "parent_ids": ind.parent_ids,
        "generation": ind.generation, "model": ind.model, "trigger": ind.trigger,
        "question_id": ind.question_id, "question_text": lin.question_text(ind.question_id),
        "asked_by_person": lin.asked_by_person(ind.question_id), "knobs": ind.knobs, "status": ind.status,
        "fitness": ind.fitness,
        "gain": ratio(parents[0].fitness if parents else None, ind.fitness if ind.status == "correct" else None),
        "failure": lin.failure(ind.id), "source_file": lin.source_name(ind.id), "source": lin.source(ind.id),
        "diffs": [{"parent": p.id, "diff": lin.diff(p.id, ind.id)} for p in parents],
        "scenarios": lin.scenarios(ind.id), "reference_reused": lin.screened(ind.id),
        "against_parents": [{"parent": p.id, "scenarios": [delta_document(d) for d in lin.compare(p.id, ind.id)]}
                            for p in parents],
        "build_log": lin.build_log(ind.id), "llm_call": lin.llm_call(ind.id),
        "failed_proposals": [asdict(f) for f in lin.failed_proposals(ind.id)],
        "notes": [asdict(note) for note in kernel_notes(lin.run_dir, ind.id)]}


def produced(lin: Lineage, outcome: dict) -> str:
    """What one asking of a person's question produced, in a few words."""
    if "child" in outcome:
        child = lin.individuals.get(outcome["child"])
        if child is None:
            return f"#{outcome['child']}"
        if child.status == "correct" and child.fitness is not None:
            gain = lin.gain(child)
            return f"#{child.id} {child.fitness:.3f}" + (f" ({100 * (gain - 1):+.1f}%)" if gain else "")
        return f"#{child.id} {child.status}"
    if "duplicate_of" in outcome:
        return f"same as #{outcome['duplicate_of']}"
    if "prompt" in outcome:
        return f"prompt {outcome['prompt']} (model files: see evokernel prompts)"
    return f"failed: {outcome.get('failed', '?')}"


def asked_documents(lin: Lineage) -> list[dict]:
    """The questions people asked the run (`ask --list --json`), oldest first: queued (in RUN/questions/, not yet
    taken by the driver), received, or answered, each with what it produced."""
    from evokernel.store import inbox

    waiting, _ = inbox.queued(lin.run_dir)
    ids = {q.id for q in lin.human_questions}
    entries = [(q, "queued") for _, q in waiting if q.id not in ids]
    entries += [(q, "answered" if q.asked >= q.times else "received") for q in lin.human_questions]
    entries.sort(key=lambda entry: (entry[0].asked_at, entry[0].id))
    return [{**asdict(q), "status": status, "produced": [produced(lin, o) for o in q.outcomes]}
            for q, status in entries]


def prompt_documents(lin: Lineage, show_all: bool = False) -> list[dict]:
    """The prompts of the `files` model (`prompts --json`): the open ones (`show_all`: also those closed), without
    their text, each with its status and file."""
    from evokernel.store import prompt_box

    given = prompt_box.answer_files(lin.run_dir)
    return [{**{k: v for k, v in asdict(p).items() if k != "prompt"},
             "status": "answer given, not yet taken" if p.status == "open" and p.id in given else p.status,
             "file": str(prompt_box.prompt_path(lin.run_dir, p.id))}
            for p in lin.store.prompts() if show_all or p.status == "open"]
