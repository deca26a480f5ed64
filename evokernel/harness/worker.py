"""The child process that makes the inputs, calls the kernels, verifies their outputs and times them.

Started by `supervisor.run_worker` inside the sandbox (how it starts: `worker_start`): the request arrives on
stdin; every step, verdict and timed call goes to the parent as one JSON line on the harness channel as it
happens. Every built kernel runs in a runner process (`runner.py`) and this process never loads candidate
code; the parent still re-checks what it can (sampled outputs recomputed from the seeds, times derived from
the individual calls; see `judge.py`). Nothing is written to or read from the scratch directory. Its messages
go out through `protocol.Channel`.

Timing protocol: before every timed call, new input values (the scenario's inputs rolled, as flat arrays or along
an axis, by offsets never used before in this scenario) and NaN-poisoned outputs; after it, the guard bands and every output
element's finiteness are checked; sampled elements of 16 calls and the whole output of two, which the kernel
cannot predict, against a float64 reference.
"""

from __future__ import annotations

import math
import random
import signal
import sys
import time
import traceback
from collections import deque
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import numpy as np

from evokernel.harness import values
from evokernel.harness.backends import Fault, single_call_ms
from evokernel.harness.languages import LANGUAGES
from evokernel.harness.protocol import (FULL_CHECKS_PER_SCENARIO, PHASE_CALLS, Channel, CheckRequest, Rejected,
                                        must_confirm, net_ms, timing_call)
from evokernel.harness.failures import device_failure, readable_failure
from evokernel.harness.runner import RunnerGone, refuse_inspection
from evokernel.harness.worker_start import baseline_kernel, import_backend, read_request
from evokernel.harness.task import BUILT_SPEED_REFERENCES, Task, sampled_elements
from evokernel.harness.task_loader import load_task_dir

LIMIT_FACTOR = 50.0  # a step may take this many times the original's time before it is killed
ROW_BOUND_FACTOR = 2.0  # x the verification bound, for sampled elements of timed calls (a stale answer: far more)
LIBRARY_WARMUP_S = 300.0  # a library's first calls on a shape (torch.compile: 12 s on 2 CPU cores; cuDNN: 0.6 s)
# Timed calls a scenario whose sampled elements are checked, drawn at random here (no runner can read which); a
# kernel that answers a fraction f of its calls from stale work fails these or the full checks with 1 - (1 - f)^18.
SAMPLED_CALLS = 16


class Worker:
    def __init__(self, request: CheckRequest, channel: Channel, backend) -> None:
        self.request, self.channel, self.backend = request, channel, backend
        channel.send("hello", device=self.backend.device_name())
        self.task: Task = load_task_dir(Path(request.task))
        self.library, self.language = Path(request.library), LANGUAGES[self.task.language]
        self.candidate = self.backend.load(self.library / "candidate.so", self.task.entry, self.language)
        speed = request.speed_reference
        self.baselines = {name: baseline_kernel(self.task, name) for name in request.baselines}
        self.built = {"candidate"} | ({"reference"} if speed in BUILT_SPEED_REFERENCES else set())  # write outputs
        self.seed = int(request.seed)
        self.live: deque = deque(maxlen=2)  # this run's buffers and the previous run's (poisoned)
        self.seconds: dict[str, float] = {}  # where the worker's time goes
        self.limit_s = request.min_limit_s
        self.scenario_name = ""
        self.current_step = ""

    # The original and a kernel-file speed reference are loaded (a runner each) at their first call: a screened
    # check calls neither.
    @cached_property
    def original(self):
        return self.backend.load(self.library / "original.so", self.task.entry, self.language)

    @cached_property
    def speed_reference(self):
        speed = self.request.speed_reference
        return (self.original if speed == "original" else
                self.backend.load(self.library / "speed_reference.so", self.task.entry, self.language)
                if speed == "file" else baseline_kernel(self.task, speed))

    @contextmanager
    def spent(self, part: str):  # the block's time added to `part` of the worker's time (reported with its phases)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - started

    def step(self, text: str, calls: int = 1, at_least_s: float = 0.0) -> None:
        """Announce a step; the parent kills the worker if the next message takes longer than its limit."""
        self.current_step = text
        self.channel.send("step", text=text, limit_s=max(self.limit_s * calls, at_least_s))

    def scenario_seed(self, index: int, call: int) -> int:
        return values.mix(self.seed, index, call)

    def fresh_inputs(self, scenario, seed: int, distribution: str):
        """New buffers at new addresses: the last run's (poisoned) buffers stay allocated until these exist,
        so a kernel that kept a pointer from an earlier call reads NaN instead of a stale answer."""
        inputs = self.backend.make_inputs(self.task.arguments(scenario), scenario, seed, distribution, self.task.dtype)
        self.live.append(inputs)
        return inputs

    # -- correctness ------------------------------------------------------------------------
    def check_output(self, inputs, rc: int, fault: Fault | None = None) -> None:
        """Return code, guard bands, every element written and finite (`fault`: read already, with its request's)."""
        fault = fault or self.backend.faults([inputs])[0]
        if rc != 0:  # the candidate's own code; where the CUDA runtime refused it a call, which and why
            refused = self.candidate.runner.refused
            raise Rejected(f"returned error code {rc}"
                           + (f" (the CUDA runtime's last error: {refused})" if refused else ""))
        if broken := fault.broken_guard:
            where = f"output {broken}" if broken in inputs.output_names else f"input {broken}"
            raise Rejected(f"wrote outside its output (the guard band around {where} changed)")
        for name, count in fault.nonfinite.items():
            if count:
                raise Rejected(f"wrote NaN/Inf or left output {name} unwritten at {count} of "
                               f"{self.backend.size(inputs.arrays[name])} elements")

    def check_sample(self, inputs, bounds: dict[str, float], seed: int, offsets: tuple[int, ...]) -> dict:
        """Sampled output elements against a float64 reference; returns them (the parent re-checks them
        itself)."""
        picks = sampled_elements(self.task, inputs.scenario, seed, offsets)
        expected = self.task.reference_at(inputs.scenario, picks,
                                          lambda name, flat: self.backend.gather(inputs.arrays[name], flat))
        got = {name: self.backend.gather(inputs.arrays[name], picks[name]) for name in picks}
        for name in picks:
            error = float(np.max(np.abs(got[name] - expected[name]), initial=0.0))
            if not error <= bounds[name]:
                raise Rejected(f"wrong values in output {name} at sampled elements (error {error:.3g} > "
                               f"{bounds[name]:.3g})")
        return {name: [v if math.isfinite(v) else None for v in values_.tolist()] for name, values_ in got.items()}

    def compare(self, outputs: dict, reference: dict, plain: dict) -> dict:
        """Per output: max and relative error against the reference, and the bound the max error must meet."""
        tol, backend = self.request.tolerance, self.backend
        return {name: (backend.max_abs_diff(outputs[name], reference[name]),
                       backend.relative_error(outputs[name], reference[name]),
                       tol["factor"] * backend.max_abs_diff(plain[name], reference[name]) + tol["floor"])
                for name in outputs}

    def verify_once(self, scenario, seed: int, distribution: str, time_original: bool) -> tuple[dict, dict]:
        """One trial: (per-output bounds, the worst output's errors with its sampled elements). The original is
        run only for its time (`time_original`), which scales the scenario's limits: comparing outputs with it
        could reject nothing, as a candidate within its bound of the reference is within that bound plus the
        original's own error of the original."""
        backend = self.backend
        inputs = self.fresh_inputs(scenario, seed, distribution)
        try:
            snapshot = backend.snapshot(inputs)
            if time_original:
                started = time.perf_counter()
                with self.spent("verification: kernels"):
                    backend.run(self.original, inputs)
                self.limit_s = max(self.request.min_limit_s, LIMIT_FACTOR * (time.perf_counter() - started))
                self.step(f"verification of {self.scenario_name} (candidate)")
            with self.spent("verification: kernels"):
                rc, outputs = backend.run(self.candidate, inputs)
            if rc == 0 and not backend.unchanged(inputs, snapshot):
                raise Rejected("modified its inputs")
            self.check_output(inputs, rc)
            with self.spent("verification: references"):
                reference = self.task.reference(inputs.inputs(), scenario, True)
                plain = self.task.reference(inputs.inputs(), scenario, False)
            errors = self.compare(outputs, reference, plain)
            for name, (max_err, _, bound) in errors.items():
                if max_err > bound:
                    raise Rejected(f"max error {max_err:.3g} in output {name} against the reference exceeds "
                                   f"{bound:.3g} (seed {seed}, {distribution} inputs)")
            bounds = {name: bound for name, (_, _, bound) in errors.items()}
            rows = self.check_sample(inputs, bounds, seed, (0,) * len(inputs.input_names))
            worst = max(errors, key=lambda name: errors[name][0] / errors[name][2])
            max_err, rel_err, bound = errors[worst]
            return bounds, {"max_err": max_err, "rel_err": rel_err, "tolerance": bound, "rows": rows}
        finally:
            backend.release(inputs)

    def verify(self, scenario, index: int, trials: int) -> tuple[dict, dict]:
        """Every trial; returns the loosest bound per output (for timed calls' sampled checks), the worst errors."""
        worst: dict = {}
        bounds: dict[str, float] = {}
        reused = self.request.reference_ms
        if reused:  # screening: the speed reference's time from an earlier check scales the limits (a library's
            # is far shorter than a naive original's; the limits have a floor, `min_limit_s`)
            self.limit_s = max(self.request.min_limit_s, LIMIT_FACTOR * reused[index] / 1e3)
        for trial in range(trials):
            self.step(f"verification of {self.scenario_name} (trial {trial + 1})")
            seed = self.scenario_seed(index, trial)
            distribution = self.task.distributions[trial % len(self.task.distributions)]
            trial_bounds, stats = self.verify_once(self.task.vary(scenario, trial), seed, distribution,
                                                   time_original=trial == 0 and not reused)
            self.channel.send("trial", index=index, call=trial, rows=stats.pop("rows"))
            bounds = {name: max(bound, bounds.get(name, bound)) for name, bound in trial_bounds.items()}
            if not worst or stats["max_err"] / stats["tolerance"] > worst["max_err"] / worst["tolerance"]:
                worst = stats
        return bounds, worst

    # -- speed ------------------------------------------------------------------------------
    def time(self, scenario, index: int, bounds: dict[str, float], phase: str) -> float:
        """Interleaved timed calls, each on inputs no call has seen and poisoned outputs; every call's time goes to
        the parent as it happens (it computes medians and spreads). Screening times the candidate alone. A request
        holds `batch` calls on buffers of their own (a runner's round trip would swamp a short kernel), and an
        empty request timed in every round measures the round trip that the parent takes off."""
        backend, req = self.backend, self.request
        self.step(f"{phase} of {self.scenario_name}")
        base_seed = self.scenario_seed(index, PHASE_CALLS[phase] - 1)
        base = backend.make_inputs(self.task.arguments(scenario), scenario, base_seed, "normal", self.task.dtype)
        inputs = self.fresh_inputs(scenario, base_seed ^ 1, "normal")
        kernels = {"candidate": self.candidate} if phase == "screening" else \
            {"candidate": self.candidate, "reference": self.speed_reference, **self.baselines}
        names = [name for name, fn in kernels.items() if getattr(fn, "supports", lambda s: True)(scenario)]
        self.warm_up(kernels, names, inputs, req.warmup)
        requests = [inputs]  # each call of a request on buffers of its own, made (and warmed) as needed
        call_ms, batch = self.estimate(kernels, names, requests)
        rounds = req.rounds
        if req.timing_budget_ms is not None:  # slow kernels get fewer rounds (never fewer than 5)
            rounds = max(5, min(rounds, int(req.timing_budget_ms / max(batch * sum(call_ms.values()), 1e-3))))
        rolled = self.task.inputs(scenario)
        batch = max(1, min(batch, math.prod(t.roll_positions for t in rolled) // (rounds * len(names))))
        calls = rounds * batch  # of each kernel
        offsets = values.call_offsets(rolled, base_seed, calls * len(names))
        full_checks = set(random.SystemRandom().sample(range(calls), min(FULL_CHECKS_PER_SCENARIO, calls)))
        sampled = {name: set(random.SystemRandom().sample(range(calls), min(SAMPLED_CALLS, calls))) for name in names}
        row_bounds = {name: ROW_BOUND_FACTOR * bound for name, bound in bounds.items()}
        self.more_buffers(kernels, names, requests, batch)
        candidate_ms, overhead_ms = [], []
        self.step(f"{phase} of {self.scenario_name} ({rounds} rounds of {batch} call{'s' * (batch > 1)})",
                  calls=len(names) * batch)
        for round_index in range(rounds):
            with self.spent("timing: requests"):
                overhead = backend.overhead_ms()
            if overhead is not None:
                overhead_ms.append(overhead)
                self.channel.send("overhead", index=index, phase=phase, ms=overhead)
            for name in names[round_index % len(names):] + names[:round_index % len(names)]:
                kernel_index = names.index(name)
                numbers = [round_index * batch + position for position in range(batch)]
                rolls = [offsets[number * len(names) + kernel_index] for number in numbers]
                with self.spent("timing: inputs"):
                    for call_inputs, roll in zip(requests, rolls):
                        backend.roll_inputs(call_inputs, base, roll)
                        backend.poison_outputs(call_inputs)
                with self.spent("timing: requests"):
                    ms = backend.time_calls(kernels[name], requests[:batch])
                with self.spent("timing: checks"):  # the request's calls' guards and outputs, read at once
                    faults = backend.faults(requests[:batch]) if name in self.built else [None] * batch
                for number, call_inputs, roll, fault in zip(numbers, requests, rolls, faults):
                    try:
                        with self.spent("timing: checks"):
                            if name in self.built:
                                self.check_output(call_inputs, 0, fault)
                            rows = (self.check_sample(call_inputs, row_bounds, base_seed, roll)
                                    if number in sampled[name] and name in self.built else None)
                        self.channel.send("call", index=index, call=timing_call(number, kernel_index, phase),
                                          kernel=name, ms=ms, batch=batch, offsets=list(roll), rows=rows,
                                          limit_s=self.limit_s * batch)
                        if name == "candidate" and number in full_checks:
                            with self.spent("timing: checks"):
                                self.full_check(call_inputs, bounds)
                            self.channel.send("full-check", index=index, call=timing_call(number, kernel_index, phase),
                                              limit_s=self.limit_s * batch)
                    except Rejected as exc:
                        raise Rejected(f"{exc} (timed call {number + 1} of {self.scenario_name})") from None
                if name == "candidate":
                    candidate_ms.append(ms)
        for buffers in (base, *requests):
            backend.release(buffers)
        return net_ms(candidate_ms, overhead_ms, batch)

    def estimate(self, kernels: dict, names: list[str], requests: list) -> tuple[dict[str, float], int]:
        """Each kernel's time for one call, and the calls per timed request. A first request of one call
        includes the round trip; where that suggests batching, a request of that many calls, less the median
        of three empty round trips, gives the estimate."""
        backend = self.backend
        call_ms = {name: single_call_ms(backend, kernels[name], requests[0]) for name in names}
        batch = backend.batch_size(min(call_ms.values()))
        if batch > 1:
            round_trip_ms = float(np.median([backend.overhead_ms() or 0.0 for _ in range(3)]))
            self.more_buffers(kernels, names, requests, batch)
            call_ms = {name: max(backend.time_calls(kernels[name], requests[:batch]) - round_trip_ms / batch, 1e-4)
                       for name in names}
            batch = backend.batch_size(min(call_ms.values()))
        return call_ms, batch

    def more_buffers(self, kernels: dict, names: list[str], requests: list, count: int) -> None:
        """At least `count` sets of buffers in `requests`, each new one called once by every kernel, untimed."""
        while len(requests) < count:
            requests.append(self.backend.like(requests[0]))
            self.warm_up(kernels, names, requests[-1], 1)

    def warm_up(self, kernels: dict, names: list[str], inputs, calls: int) -> None:
        """Every kernel called `calls` times on `inputs`, untimed. A library's first calls on new buffers prepare
        its inputs, build its plans or compile it (torch.compile: seconds): that step has time of its own."""
        libraries, resumed = [name for name in names if name not in self.built], self.current_step
        if libraries:
            self.step(f"warm-up of {', '.join(libraries)} on {self.scenario_name}", at_least_s=LIBRARY_WARMUP_S)
        for _ in range(calls):
            for name in names:
                kernels[name](inputs)
        if libraries:
            self.step(resumed)

    def full_check(self, inputs, bounds: dict[str, float]) -> None:
        """Every element of a timed call's outputs against the precise reference, within the bound that
        verification set for this scenario (the loosest of its trials: no plain reference to compute again)."""
        reference = self.task.reference(inputs.inputs(), inputs.scenario, True)
        for name, bound in bounds.items():
            max_err = self.backend.max_abs_diff(inputs.arrays[name], reference[name])
            if not max_err <= bound:
                raise Rejected(f"max error {max_err:.3g} in output {name} exceeds {bound:.3g} on a timed call "
                               "(returns a cached or stale answer?)")

    def run(self) -> None:
        scenarios = [self.task.scenario_from(s) for s in self.request.scenarios]
        bounds: dict[int, dict[str, float]] = {}
        started = time.perf_counter()
        for index, scenario in enumerate(scenarios):
            self.scenario_name = scenario.name
            try:
                bounds[index], stats = self.verify(scenario, index, self.request.trials)
            except Rejected as exc:
                self.channel.send("rejected", index=index, error=self.reason(exc))
                if not self.request.keep_going:
                    break
                continue
            self.channel.send("verified", index=index, **stats)
        self.seconds["verification"] = time.perf_counter() - started
        started = time.perf_counter()
        if len(bounds) == len(scenarios) and self.request.time:
            if not self.request.reference_ms or self.screen(scenarios, bounds):
                self.time_all(scenarios, bounds)
        self.seconds["timing"] = time.perf_counter() - started
        self.channel.send("done", seconds={name: round(value, 3) for name, value in self.seconds.items()})

    def reason(self, exc: Rejected) -> str:
        """A rejection's text; where the runner died, with its step (a device fault as the device said it)."""
        if isinstance(exc, RunnerGone):  # (the parent names the scenario)
            return device_failure(str(exc), "", self.current_step) or f"{exc} during {self.current_step}"
        return str(exc)

    def time_all(self, scenarios: list, bounds: dict[int, dict[str, float]]) -> None:
        """Every scenario interleaved with the speed reference (and a kernel below the roofline again)."""
        for index, scenario in enumerate(scenarios):
            self.scenario_name = scenario.name
            try:
                median_ms = self.time(scenario, index, bounds[index], "timing")
            except Rejected as exc:
                self.channel.send("rejected", index=index, error=self.reason(exc))
                return
            if median_ms < self.request.floors_ms[index]:
                try:
                    self.time(scenario, index, bounds[index], "re-timing")
                except Rejected as exc:
                    self.channel.send("rejected", index=index, error=f"faster than the roofline and then {exc}")
                    return

    def screen(self, scenarios: list, bounds: dict[int, dict[str, float]]) -> bool:
        """The candidate alone on every scenario, against the speed reference's times of an earlier check on
        this GPU (`reference_ms`); returns whether it must be timed interleaved after all: its screened
        geomean speedup reaches `confirm_above`, or a scenario is below the roofline. The parent holds the
        worker to the same rule."""
        medians = []
        for index, scenario in enumerate(scenarios):
            self.scenario_name = scenario.name
            try:
                medians.append(self.time(scenario, index, bounds[index], "screening"))
            except Rejected as exc:
                self.channel.send("rejected", index=index, error=self.reason(exc))
                return False
        return must_confirm(medians, self.request)


def main() -> None:
    """`python -m evokernel.harness.worker BACKEND TASK_DIR CHANNEL_FD`: the runtime is imported and the task
    loaded before the request is read, so a worker started ahead of time waits with that part of its
    start-up paid (see `read_request` for the device context)."""
    if len(sys.argv) != 4:
        sys.exit("usage: python -m evokernel.harness.worker BACKEND TASK_DIR CHANNEL_FD")
    refuse_inspection()
    channel = Channel(int(sys.argv[3]))
    worker = None
    seconds: dict[str, float] = {}
    try:
        backend_module = import_backend(sys.argv[1])
        task = load_task_dir(Path(sys.argv[2]))
        request, backend = read_request(backend_module, task, seconds)
        signal.alarm(math.ceil(request.self_destruct_s))  # SIGALRM's default action ends the process
        worker = Worker(request, channel, backend)
        worker.seconds.update(seconds)
        worker.run()
    except Rejected as exc:  # a kernel its runner could not load
        channel.send("error", error=str(exc))
    except Exception as exc:  # a kernel error surfaced by the runtime (illegal address, launch failure)
        scenario = worker.scenario_name if worker else ""
        channel.send("error", error=readable_failure(exc, scenario, None), traceback=traceback.format_exc()[-2000:])


if __name__ == "__main__":
    main()
