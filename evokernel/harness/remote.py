"""Ray evaluation workers: one actor per evaluation slot, each holding the resources of one
evaluation (a whole GPU for a CUDA task), running one check at a time, so two timed kernels never
share a GPU. The candidate itself runs in the harness's sandboxed child process with a hard time
limit; a worker that dies anyway costs that one evaluation (reported as rejected), never the run.
Evaluations are never retried automatically.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from evokernel.errors import BadInput
from evokernel.harness.check import CheckOptions, build_checked, check_source
from evokernel.harness.report import CheckReport
from evokernel.harness.tasks import Task, get_task

DEADLINE_MARGIN_S = 60.0  # beyond the harness's own limits, before the driver kills a worker
MAX_RESENDS = 5  # calls sent again to an actor that was restarting (it never ran them)
RESEND_DELAY_S = 1.0


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


def connect(address: str | None) -> bool:
    """Join the Ray cluster at `address`, or start a local instance; returns whether we started it."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BadInput(f"cannot join the Ray cluster at '{address}': {str(exc).splitlines()[0]}") from None
    else:
        # A private local instance: its start-up notices (token set-up, "Started a local Ray instance") are noise.
        ray.init(num_cpus=os.cpu_count(), num_gpus=detect_gpus(), include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    return True


class _Evaluator:
    """Ray actor body: checks sources for one task with fixed options."""

    def __init__(self, task_name: str, options: dict) -> None:
        self.task_name = task_name
        self.options = CheckOptions(**options)
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def evaluate(self, source: str, label: str, options: dict | None = None) -> tuple[dict, str]:
        """Check one source (with other options for a re-check); returns the report and this worker's name."""
        chosen = CheckOptions(**options) if options else self.options
        return check_source(source, self.task_name, chosen, kernel_name=label).to_dict(), self.name


def _prebuild(source: str, task_name: str) -> None:
    """Ray task body: compile a candidate into the build cache (a GPU worker then finds it there)."""
    build_checked(source, get_task(task_name), "candidate")


@dataclass
class Finished:
    key: Any  # what the caller submitted it under
    report: dict  # CheckReport.to_dict()
    worker: str | None
    started_at: float
    seconds: float


@dataclass
class _Call:
    key: Any
    slot: int
    started_at: float
    deadline: float
    request: tuple  # (source, label, options dict or None): resent if the actor was restarting
    killed: bool = False
    resends: int = 0


@dataclass
class EvaluationPool:
    """`slots` evaluation actors; `submit` when `free_slots()`, then `wait` for finished ones."""

    task: Task
    options: CheckOptions
    slots: int
    num_cpus: float
    num_gpus: float
    actors: list = field(default_factory=list)
    calls: dict = field(default_factory=dict)  # ObjectRef -> _Call
    builds: list = field(default_factory=list)  # prebuilds in progress
    busy_seconds: float = 0.0
    first_submit: float | None = None

    def __post_init__(self) -> None:
        import ray

        remote = ray.remote(max_restarts=-1, max_task_retries=0)(_Evaluator)
        self.actors = [remote.options(num_cpus=self.num_cpus, num_gpus=self.num_gpus)
                       .remote(self.task.name, asdict(self.options)) for _ in range(self.slots)]
        self._prebuild = ray.remote(num_cpus=1, max_retries=0)(_prebuild)
        self.deadline_s = self.options.timeout_s + self.options.compile_timeout_s + DEADLINE_MARGIN_S

    def prebuild(self, source: str) -> None:
        """Compile a queued CUDA candidate on a CPU worker while the GPUs are busy, so that the GPU
        worker's build is a cache hit (same node). CPU tasks are not prebuilt: compiling next to
        a timed CPU kernel would disturb its timing."""
        import ray

        if self.task.language != "cuda":
            return
        if self.builds:
            _, self.builds = ray.wait(self.builds, num_returns=len(self.builds), timeout=0)
        self.builds.append(self._prebuild.remote(source, self.task.name))

    def free_slots(self) -> int:
        return self.slots - len(self.calls)

    def in_flight(self) -> int:
        return len(self.calls)

    def submit(self, key: Any, source: str, label: str, options: CheckOptions | None = None) -> None:
        busy = {call.slot for call in self.calls.values()}
        slot = next(i for i in range(self.slots) if i not in busy)
        now = time.time()
        self.first_submit = self.first_submit or now
        request = (source, label, asdict(options) if options else None)
        self.calls[self.actors[slot].evaluate.remote(*request)] = _Call(key, slot, now, now + self.deadline_s, request)

    def wait(self, timeout: float) -> list[Finished]:
        """Finished evaluations (possibly none after `timeout` seconds)."""
        import ray

        if not self.calls:
            return []
        self._enforce_deadlines()
        ready, _ = ray.wait(list(self.calls), num_returns=1, timeout=timeout)
        return [finished for ref in ready if (finished := self._collect(ref)) is not None]

    def _collect(self, ref) -> Finished | None:
        """The finished call's result; None when it was resent because its actor was restarting."""
        import ray

        call = self.calls.pop(ref)
        worker = None
        try:
            report, worker = ray.get(ref)
        except ray.exceptions.ActorUnavailableError:
            if call.killed:
                report = self._failure(call, "evaluation worker died (killed after exceeding its deadline)")
            elif call.resends >= MAX_RESENDS:
                report = self._failure(call, "evaluation worker unavailable (restarting)")
            else:  # the actor is coming back after a restart: the call never reached it, send it again
                time.sleep(RESEND_DELAY_S * (call.resends + 1))
                call.resends += 1
                self.calls[self.actors[call.slot].evaluate.remote(*call.request)] = call
                return None
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
            why = "killed after exceeding its deadline" if call.killed else type(exc).__name__
            report = self._failure(call, f"evaluation worker died ({why})")
        except ray.exceptions.RayTaskError as exc:
            cause = str(exc.cause if exc.cause is not None else exc).strip().splitlines()
            report = self._failure(call, f"evaluation error: {cause[-1] if cause else type(exc).__name__}")
        seconds = time.time() - call.started_at
        self.busy_seconds += seconds
        return Finished(call.key, report, worker, call.started_at, seconds)

    def _failure(self, call: _Call, reason: str) -> dict:
        report = CheckReport(task=self.task.name, kernel=str(call.key), scenario_set=self.options.scenario_set)
        return report.reject(reason).to_dict()

    def _enforce_deadlines(self) -> None:
        import ray

        now = time.time()
        for call in self.calls.values():
            if not call.killed and now > call.deadline:
                call.killed = True
                ray.kill(self.actors[call.slot], no_restart=False)

    def busy_fraction(self) -> float | None:
        """Share of slot time spent evaluating since the first submission."""
        if self.first_submit is None:
            return None
        now = time.time()
        running = sum(now - call.started_at for call in self.calls.values())
        elapsed = (now - self.first_submit) * self.slots
        return min(1.0, (self.busy_seconds + running) / elapsed) if elapsed > 0 else None

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors, self.calls = [], {}


def evaluation_slots(task: Task, max_parallel: int | None, gpus_per_evaluation: float,
                     cpus_per_evaluation: float) -> tuple[int, float, float]:
    """(slots, CPUs per slot, GPUs per slot) that the connected cluster fits.

    CPU tasks run one evaluation at a time unless `max_parallel` says otherwise: parallel timings
    on a few cores disturb each other. GPU tasks get one slot per `gpus_per_evaluation` GPUs.
    """
    import ray

    resources = ray.cluster_resources()
    if task.backend != "cuda":
        return max_parallel or 1, cpus_per_evaluation, 0.0
    gpus = resources.get("GPU", 0)
    if gpus_per_evaluation < 1:
        raise BadInput(f"field 'resources.gpus_per_evaluation': task {task.name} times kernels on a GPU, which "
                       f"an evaluation must hold whole (at least 1, got {gpus_per_evaluation:g})")
    fit = int(gpus // gpus_per_evaluation)
    if fit < 1:
        raise BadInput(f"task {task.name} needs a CUDA GPU, and the Ray cluster has {gpus:g} "
                       f"(resources.gpus_per_evaluation = {gpus_per_evaluation:g})")
    return min(fit, max_parallel or fit), cpus_per_evaluation, gpus_per_evaluation
