"""Helpers shared by the bank and question tests: a synthetic run store with a known lineage."""

from __future__ import annotations

from pathlib import Path

from evokernel.store import Individual, Store
from evokernel.source import normalized_hash, source_hash


def add_kernel(store: Store, source: str, fitness: float | None, parents: list[int] | None = None,
               question_id: str | None = None, operator: str = "seed", llm_call_id: int | None = None) -> int:
    """Store an evaluated kernel: correct with `fitness`, or rejected when fitness is None."""
    ind = Individual(operator=operator, source_hash=source_hash(source), normalized_hash=normalized_hash(source),
                     language="c", parent_ids=parents or [], question_id=question_id, llm_call_id=llm_call_id)
    kernel_id = store.add_individual(ind, source)
    status = "correct" if fitness is not None else "rejected"
    store.update_individual(kernel_id, status=status, fitness=fitness,
                            failure=None if fitness is not None else "wrong result on d64")
    return kernel_id


def make_run(run_dir: Path, outcomes: list[tuple[str, float | None]], seed_fitness: float = 1.0) -> Path:
    """A run whose seed (fitness `seed_fitness`) has one child per (question id, child fitness)."""
    with Store(run_dir, create=True) as store:
        seed = add_kernel(store, "int seed;\n", seed_fitness)
        for index, (question_id, fitness) in enumerate(outcomes):
            add_kernel(store, f"int child_{index};\n", fitness, [seed], question_id, "question-mutation")
    return run_dir
