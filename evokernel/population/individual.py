"""DEAP creator types for kernels: the gated fitness and the individual that carries a source.

The fitness is the pair (correct, speedup) with weights (1, 1); DEAP compares weighted values
lexicographically, so a rejected kernel (0, 0) never outranks a correct one (1, s) however small s is.
"""

from __future__ import annotations

from typing import Any

from deap import base, creator


class KernelBase:
    """What every individual carries besides its fitness: the source and where it sits in the lineage."""

    def __init__(self, source: str, id: int, parent_ids: list[int] | None = None, generation: int = 0,
                 operator: str = "seed", knobs: dict[str, Any] | None = None, report: dict | None = None) -> None:
        self.source = source
        self.id = id
        self.parent_ids = list(parent_ids or [])
        self.generation = generation
        self.operator = operator
        self.knobs = dict(knobs or {})
        self.report = report

    def __repr__(self) -> str:
        return f"Kernel(id={self.id}, operator={self.operator}, fitness={self.fitness.values})"


if not hasattr(creator, "GatedFitness"):
    creator.create("GatedFitness", base.Fitness, weights=(1.0, 1.0))
if not hasattr(creator, "Kernel"):
    creator.create("Kernel", KernelBase, fitness=creator.GatedFitness)

Kernel = creator.Kernel


def gated_values(correct: bool, speedup: float | None) -> tuple[float, float]:
    """Fitness values for a harness verdict: (1, speedup) when correct, (0, 0) when rejected."""
    if not correct or speedup is None:
        return (0.0, 0.0)
    return (1.0, float(speedup))


def make_kernel(source: str, id: int, correct: bool, speedup: float | None, **lineage: Any) -> "Kernel":
    """A DEAP individual with its fitness set from the harness's verdict."""
    kernel = Kernel(source, id, **lineage)
    kernel.fitness.values = gated_values(correct, speedup)
    return kernel
