"""The child process that loads untrusted kernels, verifies them and times them.

Started by `sandbox.run_worker` inside the sandbox: the request arrives on stdin; every step, verdict
and timed call goes to the parent as one JSON line on the harness channel (fd 3) as it happens. The
parent does not take this process's word for anything it can check itself: it recomputes sampled
outputs from the seeds, derives the times from the individual calls, and holds them against its own
clock (see `check.py`). Nothing is written to or read from the scratch directory.

Timing protocol: before every timed call, new input values (the scenario's inputs rolled along the
sequence by offsets never used before in this scenario) and a NaN-poisoned output; after it, the
guard bands, every output element's finiteness and sampled rows against a float64 reference are
checked, and two calls the kernel cannot predict are verified in full.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import random
import signal
import sys
import time
import traceback
from collections import deque
from pathlib import Path

import numpy as np

from evokernel.harness import values
from evokernel.harness.backends import attention_rows, call_offsets, pick_rows
from evokernel.harness.tasks import Scenario

TRIAL_SCALE = (1.0, 1.0, 0.5)  # the third trial also varies softmax_scale
FULL_CHECKS_PER_SCENARIO = 2  # timed calls verified in full, chosen at random
LIMIT_FACTOR = 50.0  # a step may take this many times the original's time before it is killed
# Sampled rows of a timed call are held to this multiple of the scenario's verification bound (the bound
# was derived from other inputs; a stale or cached answer is off by far more).
ROW_BOUND_FACTOR = 2.0
RETIME_CALL = 10_000  # call numbers of a re-timing (below the roofline) start here
CUDA_FAILURES = (("illegal memory access", "illegal memory access"), ("misaligned address", "misaligned address"),
                 ("illegal instruction", "illegal instruction"), ("unspecified launch failure", "launch failure"),
                 ("launch timed out", "launch timed out"), ("out of memory", "ran out of device memory"),
                 ("device-side assert", "device-side assert"))


class Rejected(Exception):
    """The candidate failed a check; the message says which."""


def timing_call(round_index: int, kernel_index: int, retime: bool) -> int:
    return (RETIME_CALL if retime else 1000) + 16 * round_index + kernel_index


class Channel:
    """JSON lines to the parent."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, kind: str, **data) -> None:
        line = (json.dumps({"type": kind, **data}) + "\n").encode()
        while line:
            line = line[os.write(self.fd, line):]


def start_backend(name: str):
    """The device side: runtime import and device context (what a warm worker pays before its request)."""
    return importlib.import_module(f"evokernel.harness.backends.{name}").Backend()


class Worker:
    def __init__(self, request: dict, channel: Channel, backend) -> None:
        self.request, self.channel, self.backend = request, channel, backend
        channel.send("hello", device=self.backend.device_name())
        library = Path(request["library"])
        self.candidate = self.backend.load(library / "candidate.so")
        self.original = self.backend.load(library / "original.so")
        speed = request["speed_reference"]
        self.speed_reference = (self.original if speed == "original" else
                                self.backend.load(library / "speed_reference.so") if speed == "file" else
                                self.backend.baseline(speed))
        self.baselines = {name: self.backend.baseline(name) for name in request.get("baselines", [])}
        self.seed = int(request["seed"])
        self.live: deque = deque(maxlen=2)  # this run's buffers and the previous run's (poisoned)
        self.seconds: dict[str, float] = {}  # where the worker's time goes
        self.limit_s = request["min_limit_s"]
        self.scenario_name = ""

    def step(self, text: str, calls: int = 1) -> None:
        """Announce a step; the parent kills the worker if the next message takes longer than its limit."""
        self.channel.send("step", text=text, limit_s=self.limit_s * calls)

    def scenario_seed(self, index: int, call: int) -> int:
        return values.mix(self.seed, index, call)

    # -- correctness ------------------------------------------------------------------------
    def check_output(self, inputs, rc: int, compare: bool = True) -> None:
        """Return code, guard bands, every element written and finite (with `compare` off, the same work
        and no judgement: see `check_rows`)."""
        broken = self.backend.guards_intact(inputs)
        bad = self.backend.count_nonfinite(inputs.o)
        if not compare:
            return
        if rc != 0:
            raise Rejected(f"returned error code {rc}")
        if broken:
            where = "o" if broken == "o" else f"input {broken}"
            raise Rejected(f"wrote outside its output (the guard band around {where} changed)")
        if bad:
            raise Rejected(f"wrote NaN/Inf or left output unwritten at {bad} of {math.prod(inputs.o.shape)} elements")

    def check_rows(self, inputs, bound: float, offsets=(0, 0, 0), seed: int = 0, compare: bool = True) -> list | None:
        """Sampled output rows against a float64 reference; returns them (the parent re-checks them itself).
        With `compare` off (a library baseline writes elsewhere) the same work is done and nothing judged,
        so that every timed call carries the same overhead for the parent's wall clock."""
        b, h, rows = pick_rows(inputs.scenario, values.mix(seed, *offsets))
        q, k, v, out = self.backend.head_slices(inputs, b, h, rows)
        error = float(np.max(np.abs(out - attention_rows(q, k, v, rows, inputs.scenario, inputs.scale))))
        if not compare:
            return None
        if not error <= bound:
            raise Rejected(f"wrong output rows {rows} of head {h} (error {error:.3g} > {bound:.3g})")
        return out.tolist()

    def verify_once(self, scenario: Scenario, seed: int, distribution: str, scale_factor: float,
                    compare_original: bool) -> dict:
        backend = self.backend
        inputs = self.fresh_inputs(scenario, seed, distribution, scenario.scale * scale_factor)
        try:
            snapshot = backend.snapshot(inputs)
            if compare_original:  # timed first: it scales this scenario's time limits
                started = time.perf_counter()
                rc_orig, out_orig = backend.run(self.original, inputs)
                self.limit_s = max(self.request["min_limit_s"], LIMIT_FACTOR * (time.perf_counter() - started))
                self.step(f"verification of {scenario.name} (candidate)")
            rc, out = backend.run(self.candidate, inputs)
            if rc == 0 and not backend.unchanged(inputs, snapshot):
                raise Rejected("modified its inputs")
            self.check_output(inputs, rc)
            ref, plain = backend.reference(inputs)
            max_err, rel_err, bound = self.errors(out, ref, plain)
            if max_err > bound:
                raise Rejected(f"max error {max_err:.3g} against the reference exceeds {bound:.3g} "
                               f"(seed {seed}, {distribution} inputs, scale {inputs.scale:g})")
            rows = self.check_rows(inputs, bound, seed=seed)
            if compare_original and rc_orig == 0 and not backend.count_nonfinite(out_orig):
                orig_err = backend.max_abs_diff(out_orig, ref)
                if backend.max_abs_diff(out, out_orig) > bound + orig_err:
                    raise Rejected("disagrees with the original kernel beyond both kernels' errors")
            return {"max_err": max_err, "rel_err": rel_err, "tolerance": bound, "rows": rows}
        finally:
            backend.release(inputs)

    def errors(self, out, ref, plain) -> tuple[float, float, float]:
        """Max and relative error against the reference, and the bound the max error must meet."""
        tol = self.request["tolerance"]
        bound = tol["factor"] * self.backend.max_abs_diff(plain, ref) + tol["floor"]
        return self.backend.max_abs_diff(out, ref), self.backend.relative_error(out, ref), bound

    def fresh_inputs(self, scenario: Scenario, seed: int, distribution: str, scale: float):
        """New buffers at new addresses: the last run's (poisoned) buffers stay allocated until these exist,
        so a kernel that kept a pointer from an earlier call reads NaN instead of a stale answer."""
        inputs = self.backend.make_inputs(scenario, seed, distribution, scale)
        self.live.append(inputs)
        return inputs

    def verify(self, scenario: Scenario, index: int, trials: int, first_call: int, label: str) -> dict:
        worst: dict = {}
        for trial in range(trials):
            self.step(f"{label} of {scenario.name} (trial {trial + 1})")
            call = first_call + trial
            seed = self.scenario_seed(index, call)
            distribution = values.DISTRIBUTIONS[trial % 2]
            stats = self.verify_once(scenario, seed, distribution, TRIAL_SCALE[trial % 3],
                                     compare_original=trial == 0 and first_call == 0)
            self.channel.send("trial", index=index, call=call, distribution=distribution,
                              scale=scenario.scale * TRIAL_SCALE[trial % 3], rows=stats.pop("rows"))
            if not worst or stats["max_err"] / stats["tolerance"] > worst["max_err"] / worst["tolerance"]:
                worst = stats
        return worst

    # -- speed ------------------------------------------------------------------------------
    def time(self, scenario: Scenario, index: int, bound: float, retime: bool) -> float:
        """Interleaved timed calls, each on inputs no call has seen and a poisoned output; every call's
        event time goes to the parent as it happens (the parent computes medians and spreads)."""
        backend, req = self.backend, self.request
        self.step(("re-timing (below the roofline) of " if retime else "timing of ") + scenario.name)
        base_seed = self.scenario_seed(index, RETIME_CALL - 1 if retime else 999)
        base = backend.make_inputs(scenario, base_seed, "normal", scenario.scale)
        inputs = self.fresh_inputs(scenario, base_seed ^ 1, "normal", scenario.scale)
        kernels = {"candidate": self.candidate, "reference": self.speed_reference, **self.baselines}
        names = [name for name, fn in kernels.items() if backend.supports(fn, inputs)]
        writes_output = {"candidate"} | ({"reference"} if req["speed_reference"] in ("original", "file") else set())
        candidate_ms = []
        for _ in range(req["warmup"]):
            for name in names:
                backend.call(kernels[name], inputs)
        rounds = req["rounds"]
        if req["timing_budget_ms"] is not None:  # slow kernels get fewer rounds (never fewer than 5)
            round_ms = sum(backend.time_call(kernels[name], inputs) for name in names)
            rounds = max(5, min(rounds, int(req["timing_budget_ms"] / max(round_ms, 1e-3))))
        offsets = call_offsets(scenario, base_seed, rounds * len(names))
        full_checks = set(random.SystemRandom().sample(range(rounds), min(FULL_CHECKS_PER_SCENARIO, rounds)))
        self.step(f"timing of {scenario.name} ({rounds} rounds)", calls=len(names))
        for round_index in range(rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                kernel_index = names.index(name)
                call = timing_call(round_index, kernel_index, retime)
                roll = offsets[round_index * len(names) + kernel_index]
                backend.roll_inputs(inputs, base, roll)
                backend.poison_output(inputs)
                ms = backend.time_call(kernels[name], inputs)
                try:
                    self.check_output(inputs, 0, compare=name in writes_output)
                    rows = self.check_rows(inputs, ROW_BOUND_FACTOR * bound, roll, base_seed,
                                           compare=name in writes_output)
                    self.channel.send("call", index=index, call=call, kernel=name, ms=ms, offsets=roll, rows=rows,
                                      limit_s=self.limit_s)
                    if name == "candidate" and round_index in full_checks:  # outside the parent's call intervals
                        self.full_check(inputs)
                        self.channel.send("full-check", index=index, call=call, limit_s=self.limit_s)
                except Rejected as exc:
                    raise Rejected(f"{exc} (timed call {round_index + 1} of {scenario.name})") from None
                if name == "candidate":
                    candidate_ms.append(ms)
        self.step(f"stream audit of {scenario.name}")
        audit = backend.audit(self.candidate, inputs)
        if audit:
            raise Rejected(audit)
        backend.release(base)
        backend.release(inputs)
        return float(np.median(candidate_ms))

    def full_check(self, inputs) -> None:
        """Every element of a timed call's output, against the bound for these inputs (as in verification)."""
        ref, plain = self.backend.reference(inputs)
        max_err, _, bound = self.errors(inputs.o, ref, plain)
        if max_err > bound:
            raise Rejected(f"max error {max_err:.3g} exceeds {bound:.3g} on a timed call (returns a cached or "
                           "stale answer?)")

    def run(self) -> None:
        scenarios = [Scenario(**s) for s in self.request["scenarios"]]
        bounds: dict[int, float] = {}
        started = time.perf_counter()
        for index, scenario in enumerate(scenarios):
            self.scenario_name = scenario.name
            try:
                stats = self.verify(scenario, index, self.request["trials"], 0, "verification")
            except Rejected as exc:
                self.channel.send("rejected", index=index, error=str(exc))
                if not self.request.get("keep_going"):
                    break
                continue
            bounds[index] = stats["tolerance"]
            self.channel.send("verified", index=index, **stats)
        self.seconds["verification"] = time.perf_counter() - started
        started = time.perf_counter()
        if len(bounds) == len(scenarios) and self.request.get("time", True):
            for index, scenario in enumerate(scenarios):
                self.scenario_name = scenario.name
                try:
                    median_ms = self.time(scenario, index, bounds[index], retime=False)
                except Rejected as exc:
                    self.channel.send("rejected", index=index, error=str(exc))
                    break
                if median_ms < self.request["floors_ms"][index]:
                    try:
                        self.time(scenario, index, bounds[index], retime=True)
                    except Rejected as exc:
                        self.channel.send("rejected", index=index, error=f"faster than the roofline and then {exc}")
                        break
        self.seconds["timing"] = time.perf_counter() - started
        self.channel.send("done", seconds={name: round(value, 3) for name, value in self.seconds.items()})


def readable_failure(exc: BaseException, scenario: str, step: str | None) -> str:
    """One line for a runtime failure: "illegal memory access in d128-... (during timing of ...)"."""
    text = str(exc)
    where = f" (during {step})" if step else ""
    for needle, words in CUDA_FAILURES:
        if needle in text.lower():
            return f"{words} in {scenario}{where}" if scenario else f"{words}{where}"
    first = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
    return f"{type(exc).__name__}: {first}{where}"


def main() -> None:
    """`python -m evokernel.harness.worker [BACKEND CHANNEL_FD]`: with arguments, the backend starts before
    the request is read, so a worker started ahead of time waits with its start-up already paid."""
    channel = Channel(int(sys.argv[2])) if len(sys.argv) > 2 else None
    worker = None
    try:
        backend = start_backend(sys.argv[1]) if len(sys.argv) > 1 else None
        request = json.loads(sys.stdin.read())
        sys.stdin.close()
        signal.alarm(math.ceil(request["self_destruct_s"]))  # SIGALRM's default action ends the process
        channel = channel or Channel(int(request.get("channel_fd", 3)))
        worker = Worker(request, channel, backend or start_backend(request["backend"]))
        worker.run()
    except Exception as exc:  # a kernel error surfaced by the runtime (illegal address, launch failure)
        if channel is None:
            raise
        scenario = worker.scenario_name if worker else ""
        channel.send("error", error=readable_failure(exc, scenario, None), traceback=traceback.format_exc()[-2000:])


if __name__ == "__main__":
    main()
