"""How a worker starts, before any candidate: the backend's runtime imported, the task loaded, the request
read from stdin, and meanwhile (for a worker started ahead of its check) the device context made and a
library speed reference called once on each scenario's shapes. Only the task's own code runs here.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path

from evokernel.harness.protocol import CheckRequest
from evokernel.harness.task import Task


def import_backend(name: str):
    """The backend's module: the runtime imported (torch for CUDA), no device touched yet."""
    return importlib.import_module(f"evokernel.harness.backends.{name}")


def baseline_kernel(task: Task, name: str):
    """A library baseline of the task as a kernel: its inputs prepared once per set of buffers."""
    baseline = task.baselines()[name]

    def call(inputs) -> int:
        if name not in inputs.prepared:
            inputs.prepared[name] = (baseline.prepare(inputs.inputs(), inputs.scenario) if baseline.prepare
                                     else inputs.inputs())
        baseline.run(inputs.prepared[name], inputs.scenario)
        return 0

    call.supports = baseline.supports
    return call


class StdinLines:
    """Lines from stdin read straight from the descriptor, so that whether the next one has arrived can be
    asked without blocking (a buffered reader may hold it unseen)."""

    def __init__(self) -> None:
        self.pending = b""

    def waiting(self) -> bool:
        return b"\n" in self.pending or bool(select.select([0], [], [], 0)[0])

    def readline(self) -> str:
        while b"\n" not in self.pending:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode()


def warm_speed_reference(backend, task: Task, warm: dict, request_waiting: Callable[[], bool]) -> None:
    """Call a library speed reference once on each scenario's shapes while the worker waits for its request.
    Libraries build their plans on a shape's first call (cuDNN about 0.6 s a shape), otherwise inside the
    check's timing. Stops as soon as the request has arrived: a screened check never calls the reference.
    Only the task's own library code runs here, before any candidate is loaded."""
    if warm.get("speed_reference") not in task.baselines():
        return
    call = baseline_kernel(task, warm["speed_reference"])
    for fields in warm["scenarios"]:
        if request_waiting():
            return
        scenario = task.scenario_from(fields)
        if call.supports(scenario):
            inputs = backend.make_inputs(task.arguments(scenario), scenario, 0, "normal", task.dtype)
            call(inputs)
            backend.release(inputs)  # waits for the call (nothing of its output is read)


def read_request(backend_module, task: Task, seconds: dict):
    """The request from stdin, and the backend with its device context made. A `prepare` line before the
    request makes the context at once (the supervisor sends it when no other check is timing on the
    device), and may name a speed reference to warm up (`warm_speed_reference`); otherwise the context is
    made after the request, and its time is a phase of this check. A `prepare` with `then_exit` (a warmer
    of the JIT cache, see `jit_cache`) warms up on every scenario and ends the process: no request, no
    candidate."""
    stdin = StdinLines()
    line = stdin.readline()
    backend = None
    prepare = json.loads(line)
    if prepare.get("type") == "prepare":
        backend = backend_module.Backend()
        if prepare.get("runner") and hasattr(backend, "start_runners"):
            backend.start_runners(Path(prepare["runner"]))
        if prepare.get("warm"):
            warm_speed_reference(backend, task, prepare["warm"],
                                 (lambda: False) if prepare.get("then_exit") else stdin.waiting)
        if prepare.get("then_exit"):
            sys.exit(0)  # each warm-up call was waited for: the driver has written what it compiled
        line = stdin.readline()
    request = CheckRequest.from_json(line)
    os.close(0)
    if backend is None:
        started = time.perf_counter()
        backend = backend_module.Backend()
        seconds["device start"] = time.perf_counter() - started
    return request, backend
