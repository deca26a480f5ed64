"""What one evaluation slot keeps between its checks: the worker started ahead for its next check, the speed
reference's medians from its last interleaved check (screening reuses them), and which JIT-cache warm-ups it
has run. An evaluator owns one per slot (a Ray actor one, the local evaluator one per check it runs at once),
so two slots never share a started worker or reference times, and a check without a slot gets its own.
"""

from __future__ import annotations

import atexit
import weakref
from dataclasses import dataclass, field
from typing import Any

_OPEN: weakref.WeakSet = weakref.WeakSet()  # every slot not yet closed, closed at exit (no worker outlives us)


@dataclass(eq=False)
class Slot:
    # (backend, devices, task directory) -> a started worker (supervisor._Started) for the next check
    warm: dict[tuple, Any] = field(default_factory=dict)
    jit_warmed: set[str] = field(default_factory=set)  # warm-ups of the JIT cache this slot has run
    # (task directory, scenario set, speed reference, visible GPUs) -> (when measured, one median per scenario)
    reference_times: dict[tuple, tuple[float, list[float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _OPEN.add(self)

    def close(self) -> None:
        """Take down the worker started for a next check (and everything it started)."""
        while self.warm:
            self.warm.popitem()[1].discard()
        _OPEN.discard(self)


@atexit.register
def _close_all() -> None:
    for slot in list(_OPEN):
        slot.close()
