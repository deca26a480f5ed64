"""The child process that loads untrusted kernels, verifies them and times them.

Started by `sandbox.run_worker` with a scratch directory holding `request.json`; writes
`result.json` there. Each step is appended to `progress.txt` first, so that when a kernel kills
the process the parent can say where it happened.
"""

from __future__ import annotations

import importlib
import json
import math
import signal
import sys
import time
import traceback
from collections import deque
from pathlib import Path

import numpy as np

from evokernel.harness.tasks import Scenario

DISTRIBUTIONS = ("normal", "shifted")  # N(0,1); N(0.5, 2): large logits exercise max-subtraction
TRIAL_SCALE = (1.0, 1.0, 0.5)  # the third trial also varies softmax_scale


class Rejected(Exception):
    """The candidate failed a check; the message says which."""


class Worker:
    def __init__(self, scratch: Path, request: dict) -> None:
        self.scratch = scratch
        self.request = request
        self.backend = importlib.import_module(f"evokernel.harness.backends.{request['backend']}").Backend()
        self.candidate = self.backend.load(Path(request["candidate"]))
        self.original = self.backend.load(Path(request["original"]))
        speed = request["speed_reference"]
        self.speed_reference = (self.original if speed == "original" else
                                self.backend.load(Path(speed)) if "/" in speed else self.backend.baseline(speed))
        self.baselines = {name: self.backend.baseline(name) for name in request.get("baselines", [])}
        self.seed = int(request["seed"])
        self.live: deque = deque(maxlen=2)  # this run's buffers and the previous run's (poisoned)
        self.seconds: dict[str, float] = {}  # where the worker's time goes

    def step(self, text: str) -> None:
        with open(self.scratch / "progress.txt", "a") as f:
            f.write(text + "\n")

    # -- correctness ------------------------------------------------------------------------
    def verify_once(self, scenario: Scenario, seed: int, distribution: str, scale_factor: float,
                    compare_original: bool) -> dict:
        backend, tol = self.backend, self.request["tolerance"]
        inputs = self.fresh_inputs(scenario, seed, distribution, scenario.scale * scale_factor)
        try:
            snapshot = backend.snapshot(inputs)
            rc, out = backend.run(self.candidate, inputs)
            if rc != 0:
                raise Rejected(f"returned error code {rc}")
            if not backend.unchanged(inputs, snapshot):
                raise Rejected("modified its inputs")
            bad = backend.count_nonfinite(out)
            if bad:
                raise Rejected(f"wrote NaN/Inf or left output unwritten at {bad} of {math.prod(out.shape)} elements")
            ref, plain = backend.reference(inputs)
            max_err, rel_err, bound = self.errors(out, ref, plain)
            if max_err > bound:
                raise Rejected(f"max error {max_err:.3g} against the reference exceeds {bound:.3g} "
                               f"(seed {seed}, {distribution} inputs, scale {inputs.scale:g})")
            if compare_original:  # once per scenario: the reference already bounds every trial
                rc_orig, out_orig = backend.run(self.original, inputs)
                if rc_orig == 0 and not backend.count_nonfinite(out_orig):
                    orig_err = backend.max_abs_diff(out_orig, ref)
                    if backend.max_abs_diff(out, out_orig) > bound + orig_err:
                        raise Rejected("disagrees with the original kernel beyond both kernels' errors")
            return {"max_err": max_err, "rel_err": rel_err, "tolerance": bound}
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

    def verify(self, scenario: Scenario, index: int, trials: int, label: str) -> dict:
        worst: dict = {}
        for trial in range(trials):
            self.step(f"{label} of {scenario.name} (trial {trial + 1})")
            seed = self.seed + 7919 * index + 104729 * trial + (0 if label == "verification" else 15485863)
            stats = self.verify_once(scenario, seed, DISTRIBUTIONS[trial % 2], TRIAL_SCALE[trial % 3],
                                     compare_original=trial == 0)
            if not worst or stats["max_err"] / stats["tolerance"] > worst["max_err"] / worst["tolerance"]:
                worst = stats
        return worst

    # -- speed ------------------------------------------------------------------------------
    def time(self, scenario: Scenario, index: int) -> dict:
        backend, req = self.backend, self.request
        self.step(f"timing of {scenario.name}")
        inputs = self.fresh_inputs(scenario, self.seed + 31 * index + 1, "normal", scenario.scale)
        kernels = {"candidate": self.candidate, "reference": self.speed_reference, **self.baselines}
        runnable = {name: fn for name, fn in kernels.items() if backend.supports(fn, inputs)}
        times: dict[str, list[float]] = {name: [] for name in runnable}
        names = list(runnable)
        for _ in range(req["warmup"]):
            for name in names:
                backend.call(runnable[name], inputs)
        # Slow kernels get fewer rounds (never fewer than 5) so a check of the whole grid stays short.
        rounds = req["rounds"]
        if req["timing_budget_ms"] is not None:
            round_ms = sum(backend.time_call(runnable[name], inputs) for name in names)
            rounds = max(5, min(rounds, int(req["timing_budget_ms"] / max(round_ms, 1e-3))))
        for round_index in range(rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                times[name].append(backend.time_call(runnable[name], inputs))
        # Same buffers, new values: a kernel that replays an earlier answer is caught here.
        self.step(f"re-verification after timing of {scenario.name}")
        backend.refill(inputs, self.seed + 31 * index + 2)
        rc, out = backend.run(self.candidate, inputs)
        ref, plain = backend.reference(inputs)
        max_err, _, bound = self.errors(out, ref, plain)
        if rc != 0 or backend.count_nonfinite(out) or max_err > bound:
            raise Rejected("wrong after repeated calls on the same buffers (returns a cached answer?)")
        audit = backend.audit(self.candidate, inputs)
        if audit:
            raise Rejected(audit)
        backend.release(inputs)
        medians = {name: float(np.median(t)) for name, t in times.items()}
        q1, q3 = np.percentile(times["candidate"], [25, 75])
        return {"times": medians, "spread": float((q3 - q1) / medians["candidate"])}

    def run(self) -> dict:
        scenarios = [Scenario(**s) for s in self.request["scenarios"]]
        results = []
        failure = None
        started = time.perf_counter()
        for index, scenario in enumerate(scenarios):
            entry = {"name": scenario.name}
            try:
                entry.update(self.verify(scenario, index, self.request["trials"], "verification"))
                entry["correct"] = True
            except Rejected as exc:
                entry.update(correct=False, error=str(exc))
                failure = failure or f"{scenario.name}: {exc}"
            results.append(entry)
            if failure and not self.request.get("keep_going"):
                break
        self.seconds["verification"] = time.perf_counter() - started
        started = time.perf_counter()
        if failure is None and self.request.get("time", True):
            for index, (scenario, entry) in enumerate(zip(scenarios, results)):
                try:
                    timing = self.time(scenario, index)
                except Rejected as exc:
                    entry.update(correct=False, error=str(exc))
                    failure = f"{scenario.name}: {exc}"
                    break
                entry["time_ms"] = timing["times"]["candidate"]
                entry["original_time_ms"] = timing["times"].get("reference")
                entry["spread"] = timing["spread"]
                entry["baselines_ms"] = {n: timing["times"].get(n) for n in self.baselines}
                floor = self.request["floors_ms"][index]
                if entry["time_ms"] < floor:
                    entry["suspicious"] = True
                    try:
                        self.verify(scenario, index, 3, "re-check of a time below the roofline")
                    except Rejected as exc:
                        entry.update(correct=False, error=f"faster than the roofline and then {exc}")
                        failure = f"{scenario.name}: faster than the roofline and then {exc}"
                        break
        self.seconds["timing"] = time.perf_counter() - started
        return {"scenarios": results, "failure": failure, "device": self.backend.device_name(),
                "seconds": {name: round(value, 3) for name, value in self.seconds.items()}}


def main() -> None:
    scratch = Path(sys.argv[1])
    request = json.loads((scratch / "request.json").read_text())
    signal.alarm(math.ceil(request["self_destruct_s"]))  # SIGALRM's default action ends the process
    try:
        result = Worker(scratch, request).run()
    except Exception as exc:  # a kernel error surfaced by the runtime (illegal address, launch failure)
        steps = (scratch / "progress.txt").read_text().splitlines() if (scratch / "progress.txt").exists() else []
        where = f" during {steps[-1]}" if steps else ""
        result = {"scenarios": [], "failure": f"{type(exc).__name__}: {str(exc).strip()[:400]}{where}",
                  "traceback": traceback.format_exc()[-2000:]}
    (scratch / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
