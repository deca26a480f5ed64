"""The Ray evaluator: one actor per evaluation slot, each holding the resources of one evaluation
(a whole GPU for a CUDA task), running one check at a time, so two timed kernels never share a GPU.
The candidate itself runs in the harness's sandboxed child process with a hard time limit; a worker
that dies anyway costs that one evaluation (reported as rejected), never the run. Evaluations are
never retried automatically.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from evokernel.config import ResourceConfig
from evokernel.errors import BadInput
from evokernel.evaluation import Evaluator, Finished, detect_gpus, rejection
from evokernel.harness import CheckOptions, Slot, Task, check_source, get_task, prepare_slot, profile_of
from evokernel.harness.check import build_checked

DEADLINE_MARGIN_S = 60.0  # beyond the harness's own limits, before the driver kills a worker
MAX_RESENDS = 5  # calls sent again to an actor that was restarting (it never ran them)
RESEND_DELAY_S = 1.0


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
        _start_reaper()
        # A private local instance: its start-up notices (token set-up, "Started a local Ray instance") are noise.
        ray.init(num_cpus=os.cpu_count(), num_gpus=detect_gpus(), include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    return True


def _start_reaper() -> None:
    """The local instance about to start ends with this driver, also when it is killed: its processes inherit
    a mark from this environment, and a reaper kills the marked ones once this process is gone (`ray_reaper`)."""
    from evokernel.evaluation.ray_reaper import MARKER

    os.environ[MARKER] = instance = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    environment = {name: value for name, value in os.environ.items() if name != MARKER}
    subprocess.Popen([sys.executable, "-m", "evokernel.evaluation.ray_reaper", str(os.getpid()), instance],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)


class _Evaluator:
    """Ray actor body: checks sources for one task with fixed options."""

    def __init__(self, task: str, options: dict) -> None:
        self.task = task
        self.options = CheckOptions(**options)
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.slot = Slot()  # this actor's GPU: its warm worker and reference times

    def prepare(self) -> None:
        """This slot's first worker started (a GPU task's device context, its library warmed up) while the
        search compiles the first kernels as Ray tasks beside it."""
        prepare_slot(self.task, self.options, self.slot)

    def evaluate(self, source: str, label: str, options: dict | None = None) -> tuple[dict, str]:
        """Check one source (with other options for a re-check); returns the report and this worker's name."""
        chosen = CheckOptions(**options) if options else self.options
        return check_source(source, self.task, chosen, kernel_name=label, slot=self.slot).to_dict(), self.name


def _prebuild(source: str, task: str) -> None:
    """Ray task body: compile a candidate into the build cache (a GPU worker then finds it there)."""
    build_checked(source, get_task(task), "candidate")


@dataclass
class _Call:
    key: Any
    label: str
    slot: int
    started_at: float
    deadline: float
    request: tuple  # (source, label, options dict or None): resent if the actor was restarting
    killed: bool = False
    resends: int = 0


class RayPool(Evaluator):
    """`slots` evaluation actors of `num_cpus` CPUs and `num_gpus` GPUs each, on the connected Ray cluster."""

    def __init__(self, task: str, options: CheckOptions, slots: int, num_cpus: float, num_gpus: float,
                 owns_ray: bool = False) -> None:
        """`task` is the reference the actors resolve with `get_task`; `owns_ray`: `shutdown` stops Ray too."""
        import ray

        super().__init__(slots)
        self.task_ref, self.task = task, get_task(task)
        self.options = options
        self.owns_ray = owns_ray
        remote = ray.remote(max_restarts=-1, max_task_retries=0)(_Evaluator)
        self.actors = [remote.options(num_cpus=num_cpus, num_gpus=num_gpus).remote(task, asdict(options))
                       for _ in range(slots)]
        self.builds: list = []  # prebuilds in progress
        self.builds_ahead = profile_of(self.task.backend).builds_ahead
        self._prebuild = ray.remote(num_cpus=1, max_retries=0)(_prebuild)
        if self.builds_ahead:  # the slots start up while the task's original compiles (every check needs it)
            for actor in self.actors:
                actor.prepare.remote()
            if self.task.has_original:
                self.prebuild(self.task.original.read_text())
        self.deadline_s = options.timeout_s + options.compile_timeout_s + DEADLINE_MARGIN_S

    @classmethod
    def start(cls, resources: ResourceConfig, task: str, options: CheckOptions) -> "RayPool":
        """Join or start Ray and the pool; settings the cluster cannot hold are refused here (Ray would wait
        forever). Whatever this started is stopped again when it fails or is interrupted."""
        import ray

        owns_ray = not ray.is_initialized()
        try:
            connect(resources.address)
            slots, cpus, gpus = evaluation_slots(get_task(task), resources.max_parallel,
                                                 resources.gpus_per_evaluation, resources.cpus_per_evaluation)
            have = ray.cluster_resources().get("CPU", 0.0)
            if cpus > have:
                raise BadInput(f"field 'resources.cpus_per_evaluation': {cpus:g} CPUs per evaluation, and the Ray "
                               f"cluster has {have:g}")
            if slots * cpus > have:
                field_name = "resources.max_parallel" if resources.max_parallel else "resources.cpus_per_evaluation"
                raise BadInput(f"field '{field_name}': {slots} evaluations at once of {cpus:g} CPUs each need "
                               f"{slots * cpus:g} CPUs, and the Ray cluster has {have:g}")
            return cls(task, options, slots, cpus, gpus, owns_ray=owns_ray)
        except BaseException:
            if owns_ray:
                ray.shutdown()  # also after an interrupted start: it stops what was started
            raise

    def prebuild(self, source: str) -> None:
        """Compile a queued CUDA candidate on a CPU worker while the GPUs are busy, so that the GPU
        worker's build is a cache hit (same node). CPU tasks are not prebuilt: compiling next to
        a timed CPU kernel would disturb its timing."""
        import ray

        if not self.builds_ahead:
            return
        if self.builds:
            _, self.builds = ray.wait(self.builds, num_returns=len(self.builds), timeout=0)
        self.builds.append(self._prebuild.remote(source, self.task_ref))

    def submit(self, key: Any, source: str, label: str, options: CheckOptions | None = None) -> None:
        busy = {call.slot for call in self.calls.values()}
        slot = next(i for i in range(self.slots) if i not in busy)
        now = self._started()
        request = (source, label, asdict(options) if options else None)
        self.calls[self.actors[slot].evaluate.remote(*request)] = _Call(key, label, slot, now, now + self.deadline_s,
                                                                        request)

    def wait(self, timeout: float) -> list[Finished]:
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
        return Finished(call.key, report, worker, call.started_at, self._ended(call.started_at))

    def _failure(self, call: _Call, reason: str) -> dict:
        return rejection(self.task.name, call.label, self.options, reason)

    def _enforce_deadlines(self) -> None:
        import ray

        now = time.time()
        for call in self.calls.values():
            if not call.killed and now > call.deadline:
                call.killed = True
                ray.kill(self.actors[call.slot], no_restart=False)

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors, self.calls = [], {}
        if self.owns_ray:
            ray.shutdown()


def evaluation_slots(task: Task, max_parallel: int | None, gpus_per_evaluation: float,
                     cpus_per_evaluation: float) -> tuple[int, float, float]:
    """(slots, CPUs per slot, GPUs per slot) that the connected cluster fits.

    CPU tasks run one evaluation at a time unless `max_parallel` says otherwise: parallel timings
    on a few cores disturb each other. GPU tasks get one slot per `gpus_per_evaluation` GPUs.
    """
    import ray

    resources = ray.cluster_resources()
    if not profile_of(task.backend).devices:
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
