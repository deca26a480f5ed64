"""The parent's verdict: a report built from the worker's messages, checked against what the parent can
derive itself.

Every kernel runs in a runner process: the worker never loads candidate code and its clock is the figure.
The checks below stay as a second line:
- the inputs of every trial and timed call follow from the seed (it regenerates them, with `values`);
  the sampled output elements of one trial and one timed call per scenario, chosen here after the fact
  with randomness the worker never sees, are recomputed in float64 with the task's `reference_at` and
  must match;
- the call numbers, input offsets and round counts must be exactly those the protocol prescribes
  (a replayed or skipped call is a corrupted report);
- times are medians of the individual calls;
- a time below the roofline floor must survive a re-timing on fresh inputs, or the kernel is rejected.
"""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np

from evokernel.harness import values
from evokernel.harness.report import CheckReport, ScenarioResult, geomean
from evokernel.harness.supervisor import WorkerOutcome
from evokernel.harness.task import BUILT_SPEED_REFERENCES, Task, sampled_elements
from evokernel.harness.protocol import (FULL_CHECKS_PER_SCENARIO, MAX_BATCH, PHASE_CALLS, CheckRequest, call_phase,
                                        must_confirm, net_call_ms, timing_call, well_formed)

# (absolute, relative) by dtype: sampled elements must match the parent's own values this closely (a
# forgery check; the worker's bound on the error against the reference is the real correctness check)
ROW_TOLERANCE = {"bfloat16": (0.02, 0.02), "float16": (0.02, 0.02), "float32": (1e-3, 1e-3)}


class Refused(Exception):
    """The parent's own reason to reject the candidate (e.g. a time below the roofline)."""


class Forged(Refused):
    """The worker's report does not hold up against what the parent can check itself."""


def judge(report: CheckReport, outcome: WorkerOutcome, task: Task, scenarios: list, request: CheckRequest) -> None:
    """Fill `report` (scenarios, correctness, speedups) from `outcome`."""
    if not all(well_formed(m.data, len(scenarios)) for m in outcome.messages):
        report.reject("corrupted the harness channel (a message that is not a worker message)")
        return
    by_type: dict[str, list] = defaultdict(list)
    for message in outcome.messages:
        by_type[message.data["type"]].append(message)
    report.device = next((m.data.get("device") for m in by_type["hello"]), None)
    results = [ScenarioResult(name=s.name) for s in scenarios]
    failure = None
    for message in by_type["rejected"]:
        index = message.data["index"]
        results[index].correct, results[index].error = False, message.data["error"][:500]
        failure = failure or f"{scenarios[index].name}: {results[index].error}"
    for message in by_type["verified"]:
        entry = results[message.data["index"]]
        if entry.error is None:
            entry.correct = True
            for key in ("max_err", "rel_err", "tolerance"):
                setattr(entry, key, _number(message.data.get(key)))
    for message in by_type["error"]:
        step = outcome.last_step()
        failure = failure or message.data["error"][:500] + (f" (during {step})" if step else "")
    if failure is None and outcome.failure is not None:
        step = outcome.last_step()
        failure = outcome.failure + (f" during {step}" if step else "")
    if failure is None and not by_type["done"]:
        failure = "the worker ended without finishing its report (exited or killed itself)"
    if failure is None and len([r for r in results if r.correct]) != len(scenarios):
        failure = "the worker's report leaves scenarios unverified"
    if failure is None:
        try:
            report.reference_reused = _cross_check(results, by_type, task, scenarios, request) == {"screening"}
        except Forged as exc:
            failure = f"the harness's cross-check failed: {exc}"
        except Refused as exc:
            failure = str(exc)
    report.scenarios = results if failure is None else [r for r in results if r.correct or r.error]
    report.suspicious = any(r.suspicious for r in results)
    if failure:
        report.reject(failure)
        return
    report.correct = True
    if request.time:
        report.geomean_speedup = geomean([s.speedup for s in results])
        for name in request.baselines:
            report.baseline_geomeans[name] = geomean([
                s.baselines_ms[name] / s.time_ms for s in results if s.baselines_ms.get(name) and s.time_ms])


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _rows_match(claimed, reference: dict[str, np.ndarray], dtype: str) -> bool:
    """Whether the worker's sampled elements (output name -> values) match the parent's reference."""
    if not isinstance(claimed, dict) or set(claimed) != set(reference):
        return False
    absolute, relative = ROW_TOLERANCE[dtype]
    for name, expected in reference.items():
        try:
            got = np.asarray(claimed[name], dtype=np.float64)
        except (TypeError, ValueError):
            return False
        if got.shape != expected.shape or not np.all(np.isfinite(got)) \
                or not np.all(np.abs(got - expected) <= absolute + relative * np.abs(expected)):
            return False
    return True


def _regenerated(task: Task, scenario, seed: int, distribution: str, offsets: tuple[int, ...]) -> dict:
    """The sampled elements' reference values for the call made from `seed` (rolled by `offsets`), from the
    seed alone: the same inputs the worker drew, without anything the worker reported."""
    rolled = {t.name: (t.shape, t.roll_axis) for t in task.inputs(scenario)}
    indices = {t.name: t.indices for t in task.inputs(scenario) if t.indices}
    fetch = values.regenerated_fetch(rolled, seed, distribution, task.dtype, offsets, indices)
    return task.reference_at(scenario, sampled_elements(task, scenario, seed, offsets), fetch)


def _cross_check(results: list[ScenarioResult], by_type: dict, task: Task, scenarios: list, request: CheckRequest) -> set[str]:
    """Check what the worker reported against the parent's own references and clock; returns the timing
    phases the scenarios' times came from."""
    chooser = random.SystemRandom()  # the worker cannot know which messages are checked
    seed = request.seed
    trials = defaultdict(list)
    for message in by_type["trial"]:
        trials[message.data["index"]].append(message.data)
    calls = defaultdict(list)
    for message in by_type["call"] + by_type["full-check"]:
        calls[message.data["index"]].append(message)
    overheads = defaultdict(list)
    for message in by_type["overhead"]:
        overheads[message.data["index"], message.data["phase"]].append(message.data["ms"])
    phases = []
    for index, scenario in enumerate(scenarios):
        got = trials[index]
        if sorted(t["call"] for t in got) != list(range(request.trials)):
            raise Forged(f"{scenario.name}: trials {[t['call'] for t in got]} reported")
        trial = chooser.choice(got)
        call = trial["call"]
        reference = _regenerated(task, task.vary(scenario, call), values.mix(seed, index, call),
                                 task.distributions[call % len(task.distributions)],
                                 (0,) * len(task.inputs(scenario)))
        if not _rows_match(trial["rows"], reference, task.dtype):
            raise Forged(f"{scenario.name}: sampled outputs of verification trial {call + 1} do not match the "
                         "parent's own reference")
        if request.time:
            phases.append(_check_timing(results[index], scenario, index, calls[index], overheads, task, request,
                                        chooser))
    if set(phases) == {"screening"} and must_confirm([r.time_ms for r in results], request):
        raise Forged("the candidate's screened times called for timing it interleaved with the speed reference, "
                     "and that timing is missing")
    if "screening" in phases and len(set(phases)) > 1:
        raise Forged("some scenarios were timed interleaved and others only screened")
    return set(phases)


def _check_timing(result: ScenarioResult, scenario, index: int, messages: list, overheads: dict, task: Task,
                  request: CheckRequest, chooser: random.Random) -> str:
    """Check one scenario's timed calls and fill its times; returns the timing phase they came from (the
    re-timing below the roofline, else the interleaved timing, else the screening against reused times).
    A call's time is its share of its request less the same share of the median empty round trip."""
    by_phase = defaultdict(list)  # calls and full-check markers, in order of arrival
    for message in sorted(messages, key=lambda m: m.arrived):
        by_phase[call_phase(message.data["call"])].append(message)
    phase = next((p for p in ("re-timing", "timing", "screening") if by_phase[p]), None)
    if None in by_phase:
        raise Forged(f"{scenario.name}: timed call {by_phase[None][0].data['call']} does not follow the protocol")
    if phase is None or (phase == "screening" and not request.reference_ms):
        raise Forged(f"{scenario.name}: no timed calls of the candidate reported")
    sequence, retimed = by_phase[phase], phase == "re-timing"
    batch = [m for m in sequence if m.data["type"] == "call"]
    if len(sequence) - len(batch) > FULL_CHECKS_PER_SCENARIO:
        raise Forged(f"{scenario.name}: {len(sequence) - len(batch)} full checks reported")
    kernels = list(dict.fromkeys(m.data["kernel"] for m in batch))
    if not batch or kernels[0] != "candidate" or (phase == "screening" and kernels != ["candidate"]):
        raise Forged(f"{scenario.name}: no timed calls of the candidate reported")
    rounds = len(batch) // len(kernels)  # calls of each kernel
    size = batch[0].data["batch"]  # calls per request
    if not 1 <= size <= MAX_BATCH or any(m.data["batch"] != size for m in batch) or rounds % size \
            or rounds < min(5, request.rounds) * size or rounds > request.rounds * size \
            or rounds * len(kernels) != len(batch):
        raise Forged(f"{scenario.name}: {len(batch)} timed calls of {len(kernels)} kernels reported")
    base_seed = values.mix(request.seed, index, PHASE_CALLS[phase] - 1)
    offsets = values.call_offsets(task.inputs(scenario), base_seed, len(batch))
    for message in batch:
        data = message.data
        kernel_index = kernels.index(data["kernel"])
        round_index = (data["call"] - timing_call(0, kernel_index, phase)) // 16
        if not 0 <= round_index < rounds or data["call"] != timing_call(round_index, kernel_index, phase) \
                or data["offsets"] != list(offsets[round_index * len(kernels) + kernel_index]) or not data["ms"] > 0:
            raise Forged(f"{scenario.name}: timed call {data['call']} does not follow the protocol")
    candidate_calls = [m.data for m in batch if m.data["kernel"] == "candidate"]
    if len({c["call"] for c in candidate_calls}) != rounds:
        raise Forged(f"{scenario.name}: timed calls repeated")
    sample = chooser.choice([c for c in candidate_calls if c.get("rows") is not None] or candidate_calls)
    reference = _regenerated(task, scenario, base_seed, "normal", tuple(sample["offsets"]))
    if not _rows_match(sample["rows"], reference, task.dtype):
        raise Forged(f"{scenario.name}: sampled outputs of a timed call do not match the parent's own reference")
    overhead = float(np.median(overheads[index, phase])) if overheads[index, phase] else 0.0
    # the round trip is taken off the kernels a runner ran; a library baseline ran in the worker, without one
    in_runner = {"candidate"} | ({"reference"} if request.speed_reference in BUILT_SPEED_REFERENCES else set())
    times = {k: [net_call_ms(m.data["ms"], overhead if k in in_runner else 0.0, size)
                 for m in batch if m.data["kernel"] == k] for k in kernels}
    result.time_ms, result.calls_per_request = float(np.median(times["candidate"])), size
    result.original_time_ms = (float(np.median(times["reference"])) if "reference" in times
                               else request.reference_ms[index] if phase == "screening" else None)
    q1, q3 = np.percentile(times["candidate"], [25, 75])
    result.spread = float((q3 - q1) / result.time_ms)
    result.baselines_ms = {name: (float(np.median(times[name])) if name in times else None)
                           for name in request.baselines}
    if result.time_ms and result.original_time_ms:
        result.speedup = result.original_time_ms / result.time_ms
    floor = request.floors_ms[index]
    if result.time_ms < floor:
        result.suspicious, result.correct = True, False
        result.error = (f"faster than the roofline allows ({result.time_ms:.4g} ms against a floor of {floor:.4g} ms"
                        f"{', also when re-timed on fresh inputs' if retimed else ''})")
        raise Refused(f"{scenario.name}: {result.error}")
    return phase
