"""Evaluators: what the search hands kernels to, and gets harness reports back from.

The search sees one interface, `Evaluator`, whatever runs the checks: `ray` (the default: one Ray
actor per evaluation slot, on one machine or a cluster), `local` (checks in threads of the driver,
no Ray: tests, a laptop) or `replay` (recorded reports served again, no harness at all: search logic
tested on a machine without the GPU the reports came from). `resources.evaluator` in the config picks
one. Interface: `Evaluator`, `Finished`, `start_evaluator`, `rejection`, `detect_gpus`, `gpu_missing`, `require_gpu`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evokernel.harness import CheckOptions, CheckReport

if TYPE_CHECKING:
    from evokernel.config import ResourceConfig


@dataclass
class Finished:
    """One finished evaluation, as `Evaluator.wait` returns it."""

    key: Any  # what the caller submitted it under
    report: dict  # CheckReport.to_dict()
    worker: str | None
    started_at: float
    seconds: float


class Evaluator(ABC):
    """Evaluation slots: `submit` while `free_slots()`, then `wait` for finished evaluations.

    Every evaluation ends in a report, also when its worker died or it was never recorded (a rejected
    report saying why); nothing is retried. Subclasses keep their evaluations in flight in `calls`
    (each with a `started_at`) and call `_started` and `_ended`, so that every evaluator counts its
    slots and its busy fraction the same way."""

    slots: int
    measures = True  # False: reports are recorded ones, so nothing can be re-timed
    builds_ahead = 0  # queued candidates per slot that `prebuild` can compile before a slot is free

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.calls: dict[Any, Any] = {}  # evaluations in flight, by a handle of the evaluator's
        self._busy_seconds = 0.0
        self._first_submit: float | None = None

    @abstractmethod
    def submit(self, key: Any, source: str, label: str, options: CheckOptions | None = None) -> None:
        """Start checking `source` (with other options for a re-check); needs a free slot."""

    @abstractmethod
    def wait(self, timeout: float) -> list[Finished]:
        """Finished evaluations (possibly none after `timeout` seconds)."""

    def in_flight(self) -> int:
        """Evaluations submitted and not yet returned by `wait`."""
        return len(self.calls)

    def free_slots(self) -> int:
        return self.slots - self.in_flight()

    def prebuild(self, source: str) -> None:
        """Compile a queued candidate ahead of its check, where that saves the check time (default: not)."""

    def shutdown(self) -> None:
        """Stop what the evaluator started; evaluations in flight are abandoned (a resume re-submits them)."""

    def busy_fraction(self) -> float | None:
        """Share of slot time spent evaluating since the first submission."""
        if self._first_submit is None:
            return None
        now = time.time()
        running = sum(now - call.started_at for call in self.calls.values())
        elapsed = (now - self._first_submit) * self.slots
        return min(1.0, (self._busy_seconds + running) / elapsed) if elapsed > 0 else None

    def _started(self) -> float:
        now = time.time()
        self._first_submit = self._first_submit or now
        return now

    def _ended(self, started_at: float) -> float:
        seconds = time.time() - started_at
        self._busy_seconds += seconds
        return seconds


def rejection(task: str, label: str, options: CheckOptions, reason: str) -> dict:
    """The report of an evaluation that ended without a harness verdict (a dead worker, a source never recorded)."""
    return CheckReport(task=task, kernel=label, scenario_set=options.scenario_set).reject(reason).to_dict()


def detect_gpus() -> int:
    """CUDA GPUs on this machine (nvidia-smi, else torch), 0 when there is none."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
            return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_missing(backend: str) -> bool:
    """Whether kernels of `backend` run on a CUDA device and this machine has none."""
    from evokernel.harness import profile_of

    return profile_of(backend).devices and not detect_gpus()


def require_gpu(task_name: str, backend: str) -> None:
    """A task whose kernels run on a CUDA device, on a machine without one: one line, before anything is built."""
    from evokernel.errors import BadInput

    if gpu_missing(backend):
        raise BadInput(f"task {task_name} needs a CUDA GPU, and this machine has none")


def start_evaluator(resources: ResourceConfig, task: str, options: CheckOptions) -> Evaluator:
    """The evaluator `resources.evaluator` names, started for `task` (a reference `get_task` accepts, which
    is also what travels to other processes); settings it cannot serve are BadInput."""
    if resources.evaluator == "local":
        from evokernel.evaluation.local import LocalEvaluator

        return LocalEvaluator.start(resources, task, options)
    if resources.evaluator == "replay":
        from evokernel.evaluation.replay import ReplayEvaluator

        return ReplayEvaluator.start(resources, task, options)
    from evokernel.evaluation.ray_pool import RayPool

    return RayPool.start(resources, task, options)
