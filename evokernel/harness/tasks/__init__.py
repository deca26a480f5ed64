"""Tasks: the contract a candidate kernel is held to (ABI, reference, original kernel, scenarios).

A task is data: adding one means adding a module here that builds a `Task` and registering it in
`TASKS`. The numerical work for a task's backend lives in `evokernel.harness.backends`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from evokernel.errors import BadInput

TASK_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Scenario:
    """One attention problem shape; softmax_scale None means 1/sqrt(head_dim)."""

    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool
    softmax_scale: float | None = None

    @property
    def name(self) -> str:
        heads = f"h{self.heads_q}" + (f"kv{self.heads_kv}" if self.heads_kv != self.heads_q else "")
        seq = f"s{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"q{self.seqlen_q}k{self.seqlen_k}"
        name = f"d{self.head_dim}-b{self.batch}-{heads}-{seq}" + ("-causal" if self.causal else "")
        return name + (f"-scale{self.softmax_scale:g}" if self.softmax_scale is not None else "")

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head `head` reads (grouped-query attention)."""
        return head // (self.heads_q // self.heads_kv)

    def visible_pairs(self) -> int:
        """Number of (query, key) pairs the mask lets through, per batch and head."""
        if not self.causal:
            return self.seqlen_q * self.seqlen_k
        offset = self.seqlen_k - self.seqlen_q
        return sum(max(0, min(self.seqlen_k, i + offset + 1)) for i in range(self.seqlen_q))

    def flops(self) -> float:
        """Matrix FLOPs of QK^T and PV over the visible pairs (the figure FlashAttention reports)."""
        return 4.0 * self.batch * self.heads_q * self.head_dim * self.visible_pairs()

    def min_bytes(self, element_size: int) -> float:
        """Each input read once and the output written once."""
        q_o = 2 * self.batch * self.seqlen_q * self.heads_q * self.head_dim
        k_v = 2 * self.batch * self.seqlen_k * self.heads_kv * self.head_dim
        return float((q_o + k_v) * element_size)


@dataclass(frozen=True)
class Task:
    """What a kernel for this task must do, and how it is built, checked and timed."""

    name: str
    description: str
    backend: str  # module in evokernel.harness.backends
    language: str  # "cuda" or "c": picks the compiler
    header: Path  # the ABI header candidates include
    original: Path  # the correct reference kernel that speedups are measured against
    scenario_sets: dict[str, tuple[Scenario, ...]]
    element_size: int
    peak_flops: float  # generous roofline ceilings: a time below the floor is suspicious
    peak_bytes_per_s: float
    tolerance_factor: float = 2.0  # candidate error <= factor * plain-dtype error + floor
    tolerance_floor: float = 1e-5
    library_baselines: tuple[str, ...] = field(default_factory=tuple)

    def scenarios(self, set_name: str) -> list[Scenario]:
        if set_name == "all":
            seen: dict[str, Scenario] = {}
            for group in self.scenario_sets.values():
                for scenario in group:
                    seen.setdefault(scenario.name, scenario)
            return list(seen.values())
        if set_name not in self.scenario_sets:
            known = ", ".join([*self.scenario_sets, "all"])
            raise BadInput(f"task {self.name} has no scenario set '{set_name}' (known: {known})")
        return list(self.scenario_sets[set_name])

    def roofline_floor_ms(self, scenario: Scenario) -> float:
        seconds = max(scenario.flops() / self.peak_flops,
                      scenario.min_bytes(self.element_size) / self.peak_bytes_per_s)
        return seconds * 1e3


def _registry() -> dict[str, Task]:
    from evokernel.harness.tasks import attention

    return {task.name: task for task in attention.TASKS}


def get_task(name: str) -> Task:
    tasks = _registry()
    if name not in tasks:
        raise BadInput(f"unknown task '{name}' (known: {', '.join(sorted(tasks))})")
    return tasks[name]


def task_names() -> list[str]:
    return sorted(_registry())
