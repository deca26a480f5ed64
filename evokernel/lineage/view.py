"""A read-only view of one run: its kernels, their sources, results and parents, ancestries and trees.

Everything here only reads, so it works on a run that is still being written and on a run copied
to another machine (even to a read-only location, or without its `-wal`/`-shm` files).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from evokernel.errors import BadInput
from evokernel.lineage.compare import ScenarioDelta, compare_scenarios
from evokernel.store import DEFAULT_RUNS, HumanQuestion, Individual, ProposalFailure, open_readonly, resolve_run

if TYPE_CHECKING:
    from evokernel.harness import SpeedReference


def _built_in_question_text(question_id: str) -> str | None:
    """The built-in bank's text for a question id (None when it has no such question)."""
    from evokernel.bank import question_text

    try:
        return question_text(question_id)
    except (BadInput, LookupError):  # no such question, or the built-in bank cannot be read
        return None


@dataclass
class Step:
    """One step of an ancestry: the kernel, the parent it was made from, and what changed."""

    individual: Individual
    parent: Individual | None
    other_parents: list[int]
    question_text: str | None
    deltas: list[ScenarioDelta] = field(default_factory=list)

    @property
    def wins(self) -> list[str]:
        return [d.name for d in self.deltas if d.verdict in ("win", "fixed")]

    @property
    def losses(self) -> list[str]:
        return [d.name for d in self.deltas if d.verdict in ("loss", "broke")]

    @property
    def ties(self) -> list[str]:
        """Scenarios whose change is within the timing noise."""
        return [d.name for d in self.deltas if d.verdict == "tie"]


@dataclass
class TreeNode:
    """A kernel in a descendant tree; `repeat` marks a child already shown under another parent."""

    individual: Individual
    children: list["TreeNode"] = field(default_factory=list)
    repeat: bool = False


class Lineage:
    """Read-only view of one run. Use as a context manager (`with Lineage.open(spec) as run:`)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.store = open_readonly(self.run_dir)
        self.individuals: dict[int, Individual] = {i.id: i for i in self.store.individuals()}

    @classmethod
    def open(cls, spec: str | Path, runs_root: Path = DEFAULT_RUNS) -> "Lineage":
        return cls(resolve_run(spec, runs_root))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Lineage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- single kernels -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.run_dir.resolve().name

    @property
    def speed_reference(self) -> SpeedReference:
        """What this run's fitness is a speedup over (the config's speed_reference)."""
        from evokernel.harness import SpeedReference, get_task

        config = self.store.meta().get("config") or {}
        try:
            task = get_task(config["task"])
        except (KeyError, BadInput):  # no config, or its task is gone: the reference without a description
            task = None
        return SpeedReference.recorded(config.get("speed_reference", "original"), task)

    def get(self, individual_id: int) -> Individual:
        if individual_id not in self.individuals:
            raise BadInput(f"run {self.name} has no kernel {individual_id} "
                           f"(ids 1-{max(self.individuals, default=0)})")
        return self.individuals[individual_id]

    def source(self, individual_id: int) -> str:
        ind = self.get(individual_id)
        path = self.store.source_path(ind.source_hash, ind.language)
        return path.read_text() if path.is_file() else f"// source file {path.name} is missing from the run\n"

    def source_name(self, individual_id: int) -> str:
        ind = self.get(individual_id)
        return f"sources/{self.store.source_path(ind.source_hash, ind.language).name}"

    def failure(self, individual_id: int) -> str | None:
        """Why the kernel was rejected; compiler messages name its source file in the run."""
        from evokernel.harness.build import show_source_paths

        return show_source_paths(self.get(individual_id).failure, self.source_name(individual_id))

    def build_log(self, individual_id: int) -> str:
        """The compiler's output for the kernel, naming its source file in the run."""
        from evokernel.harness.build import show_source_paths

        return show_source_paths(self.get(individual_id).build_log or "", self.source_name(individual_id))

    @cached_property
    def _scenarios(self) -> dict[int, list[dict]]:
        return {i: self.store.scenario_results(i) for i in self.individuals}

    def scenarios(self, individual_id: int) -> list[dict]:
        self.get(individual_id)
        return self._scenarios[individual_id]

    def screened(self, individual_id: int) -> bool:
        """Whether the kernel's speedups are against the speed reference's reused times (screened only)."""
        self.get(individual_id)
        return bool((self.store.individual(individual_id).report or {}).get("reference_reused"))

    def scenario_names(self) -> list[str]:
        """Scenario names in the order the harness ran them."""
        names: dict[str, None] = {}
        for rows in self._scenarios.values():
            names.update((row["name"], None) for row in rows)
        return list(names)

    def parents(self, individual_id: int) -> list[Individual]:
        return [self.individuals[p] for p in self.get(individual_id).parent_ids if p in self.individuals]

    @cached_property
    def _children(self) -> dict[int, list[int]]:
        children: dict[int, list[int]] = {i: [] for i in self.individuals}
        for ind in self.individuals.values():
            for parent in ind.parent_ids:
                children.setdefault(parent, []).append(ind.id)
        return children

    def children(self, individual_id: int) -> list[Individual]:
        return [self.individuals[c] for c in self._children.get(self.get(individual_id).id, [])]

    def failed_proposals(self, individual_id: int) -> list[ProposalFailure]:
        """The proposals made from this kernel (as a parent) that produced no kernel, oldest first."""
        self.get(individual_id)
        return [f for f in self.store.proposal_failures() if individual_id in f.parent_ids]

    def question_text(self, question_id: str | None) -> str | None:
        if not question_id:
            return None
        if question_id not in self._question_texts:
            self._question_texts[question_id] = _built_in_question_text(question_id)
        return self._question_texts[question_id]

    @cached_property
    def _question_texts(self) -> dict[str, str | None]:
        return {**{q["id"]: q["text"] for q in self.store.proposed_questions()},
                **{q.question_id: q.text for q in self.human_questions}}

    @cached_property
    def human_questions(self) -> list[HumanQuestion]:
        """The questions people asked the run (`evokernel ask`) that its driver received, oldest first."""
        return self.store.human_questions()

    def asked_by_person(self, question_id: str | None) -> bool:
        """Whether a question was asked by a person (`evokernel ask`) rather than drawn from the bank."""
        return any(q.question_id == question_id for q in self.human_questions)

    def question_note(self, question_id: str | None) -> str:
        """What follows a question's id or text where it is shown: who asked it, when a person did."""
        return " (asked by a person)" if self.asked_by_person(question_id) else ""

    def llm_call(self, individual_id: int) -> dict | None:
        call_id = self.get(individual_id).llm_call_id
        return self.store.llm_call(call_id) if call_id is not None else None

    def diff(self, a: int, b: int, context: int = 3) -> str:
        """Unified diff of the source of kernel `a` into kernel `b`."""
        lines = difflib.unified_diff(self.source(a).splitlines(keepends=True), self.source(b).splitlines(keepends=True),
                                     f"#{a} {self.source_name(a)}", f"#{b} {self.source_name(b)}", n=context)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def compare(self, a: int, b: int) -> list[ScenarioDelta]:
        """How kernel `b` does against kernel `a`, scenario by scenario."""
        return compare_scenarios(self.scenarios(a), self.scenarios(b))

    # -- lineage ---------------------------------------------------------------------------------
    def top(self, k: int = 1) -> list[Individual]:
        ranked = [i for i in self.individuals.values() if i.status == "correct" and i.fitness is not None]
        return sorted(ranked, key=lambda i: (-i.fitness, i.id))[:k]

    def best(self) -> Individual:
        top = self.top(1)
        if not top:
            raise BadInput(f"run {self.name} has no correct kernel yet")
        return top[0]

    def ancestry(self, individual_id: int) -> list[Step]:
        """From the seed to the kernel, following each kernel's first (primary) parent."""
        chain, current = [], self.get(individual_id)
        while True:
            parents = self.parents(current.id)
            parent = parents[0] if parents else None
            deltas = self.compare(parent.id, current.id) if parent else []
            chain.append(Step(current, parent, current.parent_ids[1:], self.question_text(current.question_id), deltas))
            if parent is None or parent.id in {s.individual.id for s in chain}:
                break
            current = parent
        return chain[::-1]

    def ancestors(self, individual_id: int) -> set[int]:
        """Every kernel the given one descends from, through any parent, and itself."""
        seen, todo = set(), [self.get(individual_id).id]
        while todo:
            current = todo.pop()
            if current not in seen and current in self.individuals:
                seen.add(current)
                todo.extend(self.individuals[current].parent_ids)
        return seen

    def descendants(self, individual_id: int, keep: set[int] | None = None) -> TreeNode:
        """The descendant tree of a kernel (only the ids in `keep`, when given)."""
        shown: set[int] = set()

        def grow(ind: Individual) -> TreeNode:
            node = TreeNode(ind, repeat=ind.id in shown)
            if node.repeat:
                return node
            shown.add(ind.id)
            node.children = [grow(c) for c in self.children(ind.id) if keep is None or c.id in keep]
            return node

        return grow(self.get(individual_id))

    def roots(self, ids: set[int]) -> list[int]:
        """The kernels among `ids` none of whose parents are among them."""
        return sorted(i for i in ids if not set(self.individuals[i].parent_ids) & ids)

    # -- whole run (the statistics built on these are in lineage.statistics) ---------------------------
    def evaluated(self) -> list[Individual]:
        """Finished evaluations in the order they finished."""
        done = [i for i in self.individuals.values() if i.status in ("correct", "rejected")]
        return sorted(done, key=lambda i: (i.finished_at or i.created_at, i.id))

    def gain(self, ind: Individual) -> float | None:
        """Child fitness over its best parent's, when both are known."""
        fits = [p.fitness for p in self.parents(ind.id) if p.fitness]
        return ind.fitness / max(fits) if fits and ind.fitness and ind.status == "correct" else None

    def retime(self, individual_id: int | None = None) -> dict | None:
        """The end-of-run re-timing of the best kernel against the seed (of `individual_id`, when given)."""
        record = self.store.meta().get("best_recheck")
        if not isinstance(record, dict) or (individual_id is not None and record.get("id") != individual_id):
            return None
        return record
