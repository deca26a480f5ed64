"""`check_kernel`: guard -> build -> verify -> time -> score, for one candidate on one task."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.harness import guard, object_imports
from evokernel.harness.build import BuildResult, build, cache_home, show_source_paths
from evokernel.harness.judge import judge
from evokernel.harness.profiles import profile_of
from evokernel.harness.protocol import CheckRequest
from evokernel.harness.report import NOT_COMPILED, CheckReport, whole_phases_seconds
from evokernel.harness.runner import build_runner
from evokernel.harness.sandbox import isolation
from evokernel.harness.slot import Slot
from evokernel.harness.speed_reference import SpeedReference
from evokernel.harness.supervisor import prepare_first_worker, run_worker
from evokernel.harness.task import Task
from evokernel.harness.task_loader import get_task


@dataclass
class CheckOptions:
    """How hard to look: trials per scenario, timing rounds, limits."""

    scenario_set: str = "quick"
    speed_reference: str = "original"  # "original", a kernel file, or a library baseline (cudnn, flash)
    baselines: bool = False
    seed: int | None = None  # None: drawn at evaluation time
    trials: int = 3
    rounds: int | None = None  # None: the backend's default, fewer for slow kernels
    warmup: int = 2
    keep_going: bool = False  # check every scenario even after one fails
    time_kernels: bool = True
    timeout_s: float = 600.0  # backstop for the whole check; hangs are caught by the scaled step limits
    compile_timeout_s: float = 180.0
    memory_limit_gb: float | None = None  # None: half of this machine's memory, at least 4 GiB
    warm_worker: bool = False  # start the next check's worker now (searches: start-up off the critical path)
    # Screening (searches): the candidate timed alone against the speed reference's times from an interleaved
    # check in this process (one GPU) at most this many seconds old; None: always interleaved.
    reference_reuse_s: float | None = None
    confirm_above: float | None = None  # a screened geomean speedup at least this is timed interleaved after all

    def memory_limit_bytes(self) -> int:
        if self.memory_limit_gb is not None:
            return int(self.memory_limit_gb * 2**30)
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return max(4 << 30, physical // 2)


def build_checked(source: str, task: Task, label: str) -> tuple[BuildResult | None, str | None]:
    """Guard and build a kernel source; returns (build, refusal reason)."""
    reason = guard.check_source(source, task.language, task.header_file, task.entry)
    if reason:
        return None, reason
    result = build(source, task.language, task.header)
    if not result.ok:
        first = next((line for line in result.log.splitlines() if "error" in line.lower()), result.log[:200])
        return result, f"{label} {NOT_COMPILED}: {first.strip()}"
    if result.library:  # C and CUDA objects alike: their own imports
        reason = object_imports.check_shared_object(result.library, task.language)
        if reason:
            return result, reason
    return result, None


def _built_speed_reference(task: Task, reference: SpeedReference) -> Path | None:
    """The built object of a kernel-file speed reference (None for the original or a library baseline)."""
    if reference.kind != "file":
        return None
    result, reason = build_checked(Path(reference.name).read_text(), task, f"speed reference {reference.name}")
    if reason:
        raise BadInput(f"speed reference {reference.name}: {reason}")
    return result.library


def _reusable_reference_ms(slot: Slot, key: tuple, options: CheckOptions) -> list[float] | None:
    """The speed reference's medians from this slot's last interleaved check like this one (a slot holds one
    GPU, so they are times of that GPU), if recent enough to screen against."""
    times = slot.reference_times
    if options.reference_reuse_s is None or options.baselines or not options.time_kernels or key not in times:
        return None
    measured_at, medians = times[key]
    return medians if time.time() - measured_at <= options.reference_reuse_s else None


def _request(task: Task, options: CheckOptions, reference: SpeedReference, seed: int) -> CheckRequest:
    """What the worker is asked to do for a check of `task` with `options` (the kernels come with it)."""
    profile = profile_of(task.backend)
    scenarios = task.scenarios(options.scenario_set)
    return CheckRequest(
        backend=task.backend, task=str(task.directory),
        speed_reference="file" if reference.kind == "file" else reference.name,
        baselines=list(task.library_baselines) if options.baselines else [],
        scenarios=[asdict(s) for s in scenarios], seed=seed, trials=options.trials,
        rounds=options.rounds or profile.rounds, warmup=options.warmup,
        timing_budget_ms=None if options.rounds else profile.timing_budget_ms,
        keep_going=options.keep_going, time=options.time_kernels,
        tolerance={"factor": task.tolerance_factor, "floor": task.tolerance_floor},
        floors_ms=[task.roofline_floor_ms(s) for s in scenarios], min_limit_s=profile.min_step_limit_s,
        confirm_above=options.confirm_above,
    )


def prepare_slot(task: Task | str, options: CheckOptions, slot: Slot) -> None:
    """Before a search slot's first check of a GPU task, with `options.warm_worker`: the library speed reference's
    JIT cache warmed and the first check's worker started with its device context, now, so that this start-up
    overlaps the first kernels' builds (which the search runs elsewhere) instead of following them. Never raises:
    whatever fails here is done again, and reported, by the check itself."""
    task = get_task(task) if isinstance(task, str) else task
    profile = profile_of(task.backend)
    if not (options.warm_worker and profile.devices):
        return
    try:
        request = _request(task, options, SpeedReference.parse(options.speed_reference, task), 0)
        runner = build_runner(cache_home(), cuda=profile.cuda_runner)
        prepare_first_worker(request, profile.start_limit_s, profile.devices, task.directory, slot, runner)
    except (BadInput, OSError, subprocess.SubprocessError):  # the first check starts its own and says why
        return


def check_source(source: str, task: Task | str, options: CheckOptions | None = None,
                 kernel_name: str = "<source>", slot: Slot | None = None) -> CheckReport:
    """Check kernel source text; never raises for a bad kernel (only for bad options). `slot` is the evaluation
    slot the check runs in (its warm worker and reused reference times); without one, the check has its own."""
    if slot is None:
        slot = Slot()
        try:
            return check_source(source, task, options, kernel_name, slot)
        finally:
            slot.close()
    options = options or CheckOptions()
    task = get_task(task) if isinstance(task, str) else task
    scenarios = task.scenarios(options.scenario_set)
    reference = SpeedReference.parse(options.speed_reference, task)
    speed_library = _built_speed_reference(task, reference)
    if options.baselines and not task.library_baselines:
        raise BadInput(f"--baselines: task {task.name} has no library baselines")
    seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "little")
    report = CheckReport(task=task.name, kernel=kernel_name, scenario_set=options.scenario_set, seed=seed,
                         speed_reference=str(reference), isolation=isolation().describe())
    started = time.perf_counter()
    candidate, reason = build_checked(source, task, "candidate")
    if candidate:
        report.build_seconds, report.build_log = round(candidate.seconds, 3), candidate.log
    if reason:
        report.check_seconds = round(time.perf_counter() - started, 3)
        return report.reject(reason)
    if task.has_original:
        original, reason = build_checked(task.original.read_text(), task, "the task's original kernel")
        if reason:  # a broken task (or installation), not a bad candidate
            raise BadInput(f"task {task.name}: {task.original}: {reason}")
    else:  # the candidate stands in: compared with itself, its own time scales the step limits
        original = candidate
    kernels = {"candidate": candidate.library, "original": original.library}
    if speed_library is not None:
        kernels["speed_reference"] = speed_library
    profile = profile_of(task.backend)
    request = _request(task, options, reference, seed)
    reference_key = (str(task.directory), options.scenario_set, str(reference),
                     os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    request.reference_ms = _reusable_reference_ms(slot, reference_key, options)
    outcome = run_worker(request, kernels, options.timeout_s, options.memory_limit_bytes(),
                         profile.start_limit_s, devices=profile.devices, keep_warm=options.warm_worker,
                         task_dir=task.directory, slot=slot,
                         runner=build_runner(cache_home(), cuda=profile.cuda_runner))
    report.check_seconds = round(time.perf_counter() - started, 3)
    judge(report, outcome, task, scenarios, request)
    medians = [s.original_time_ms for s in report.scenarios]
    if report.correct and request.time and not report.reference_reused and all(ms and ms > 0 for ms in medians):
        slot.reference_times[reference_key] = (time.time(), medians)
    phases = next((m.data.get("seconds", {}) for m in outcome.messages if m.data["type"] == "done"), {})
    # worker start: process start, runtime import (torch), device context, loading the kernels; worker end: the
    # worker taken down after its last message (its processes' device contexts torn down); a part of a phase
    # ("timing: requests") is inside its phase's time
    started_s = outcome.seconds - outcome.end_seconds - whole_phases_seconds(phases)
    report.phase_seconds = {"build": report.build_seconds or 0.0, "worker start": round(max(0.0, started_s), 3),
                            **phases, "worker end": round(outcome.end_seconds, 3)}
    return report


def check_kernel(path: Path, task: Task | str, options: CheckOptions | None = None,
                 slot: Slot | None = None) -> CheckReport:
    """Check a kernel file (see `check_source`)."""
    if not path.is_file():
        raise BadInput(f"kernel file not found: {path}")
    report = check_source(path.read_text(), task, options, kernel_name=str(path), slot=slot)
    # compiler messages name the file the user gave, not where it was compiled
    report.failure = show_source_paths(report.failure, str(path))
    report.build_log = show_source_paths(report.build_log, str(path))
    return report
