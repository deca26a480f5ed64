"""The local evaluator: checks run in threads of the driver's process, without Ray (tests, a laptop).

Each check still runs the candidate in the harness's sandboxed child process with the harness's own
time limits, so a crashing or hanging kernel costs one evaluation here too. There is no actor to
kill past a deadline and nothing to prebuild: a check builds its candidate itself.
"""

from __future__ import annotations

import os
import queue
import socket
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

from evokernel.config import ResourceConfig
from evokernel.errors import BadInput
from evokernel.evaluation import Evaluator, Finished, rejection, require_gpu
from evokernel.harness import CheckOptions, Slot, check_source, get_task, profile_of


@dataclass
class _Call:
    key: Any
    label: str
    started_at: float


class LocalEvaluator(Evaluator):
    """`slots` checks at once, each in a thread of this process and in an evaluation slot of its own (its
    warm worker and reused reference times: no two checks at once share them)."""

    def __init__(self, task: str, options: CheckOptions, slots: int) -> None:
        super().__init__(slots)
        self.task = task
        self.task_name = get_task(task).name
        self.options = options
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.threads = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="evaluation")
        self.idle_slots: queue.Queue[Slot] = queue.Queue()
        for _ in range(slots):
            self.idle_slots.put(Slot())

    @classmethod
    def start(cls, resources: ResourceConfig, task: str, options: CheckOptions) -> "LocalEvaluator":
        """CPU tasks: `max_parallel` slots (default one: parallel timings on a few cores disturb each other).
        CUDA tasks: one slot, on a machine with a GPU (the threads share the device, so two would time
        each other's kernels)."""
        if not profile_of(get_task(task).backend).devices:
            return cls(task, options, resources.max_parallel or 1)
        if (resources.max_parallel or 1) > 1:
            raise BadInput("field 'resources.max_parallel': the local evaluator times CUDA kernels one at a time "
                           "(resources.evaluator: ray runs one evaluation per GPU)")
        require_gpu(get_task(task).name, get_task(task).backend)
        return cls(task, options, 1)

    def submit(self, key: Any, source: str, label: str, options: CheckOptions | None = None) -> None:
        future = self.threads.submit(self._check, source, options or self.options, label)
        self.calls[future] = _Call(key, label, self._started())

    def _check(self, source: str, options: CheckOptions, label: str):
        slot = self.idle_slots.get()  # one is idle: no more checks run than there are slots
        try:
            return check_source(source, self.task, options, label, slot)
        finally:
            self.idle_slots.put(slot)

    def wait(self, timeout: float) -> list[Finished]:
        if not self.calls:
            return []
        done, _ = wait_futures(list(self.calls), timeout=timeout, return_when=FIRST_COMPLETED)
        return [self._collect(future) for future in done]

    def _collect(self, future: Future) -> Finished:
        call = self.calls.pop(future)
        try:
            report = future.result().to_dict()
        except Exception as exc:  # a harness error costs this evaluation, as a dead Ray worker does
            lines = str(exc).strip().splitlines()
            report = rejection(self.task_name, call.label, self.options,
                               f"evaluation error: {lines[-1] if lines else type(exc).__name__}")
        return Finished(call.key, report, self.worker, call.started_at, self._ended(call.started_at))

    def shutdown(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.calls = {}
        while not self.idle_slots.empty():  # (a check still running keeps its slot, closed at exit)
            self.idle_slots.get().close()
