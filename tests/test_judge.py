"""The parent's verdict does not take the worker's word: a real worker's report, then tampered with the
way a kernel that writes into the harness channel could, must be rejected for the tampering."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from evokernel.harness import CheckOptions, Slot, check_kernel, get_task
from evokernel.harness import check as check_module
from evokernel.harness.judge import judge
from evokernel.harness.report import CheckReport

TASK = get_task("attention-fwd-cpu")


def recorded_check(options: CheckOptions, slot: Slot | None = None):
    """(outcome, request, report) of a real check of the original kernel, the worker's outcome kept."""
    seen = {}
    real = check_module.run_worker

    def recording(request, *args, **kwargs):
        seen["request"] = request
        seen["outcome"] = real(request, *args, **kwargs)
        return seen["outcome"]

    check_module.run_worker = recording
    try:
        report = check_kernel(TASK.original, TASK, options, slot)
    finally:
        check_module.run_worker = real
    return seen["outcome"], seen["request"], report


@pytest.fixture(scope="module")
def honest():
    """(outcome, request, report) of a real check of the original kernel."""
    outcome, request, report = recorded_check(CheckOptions(scenario_set="quick", rounds=5))
    assert report.correct, report.failure
    return outcome, request, report


def verdict(outcome, request, task=TASK) -> CheckReport:
    report = CheckReport(task=task.name, kernel="k", scenario_set="quick")
    judge(report, outcome, task, TASK.scenarios("quick"), request)
    return report


def tampered(outcome, change):
    forged = copy.deepcopy(outcome)
    for message in forged.messages:
        change(message)
    return forged


def test_the_untouched_report_passes(honest):
    outcome, request, report = honest
    again = verdict(outcome, request)
    assert again.correct and again.geomean_speedup == pytest.approx(report.geomean_speedup)


def test_rows_the_parent_recomputes_must_match(honest):
    outcome, request, _ = honest

    def shift_rows(message):
        if message.data["type"] in ("trial", "call") and message.data.get("rows"):
            message.data["rows"] = {name: [value + 0.5 for value in values]
                                    for name, values in message.data["rows"].items()}

    report = verdict(tampered(outcome, shift_rows), request)
    assert not report.correct and "do not match the parent's own reference" in report.failure


def test_a_timed_call_on_repeated_inputs_breaks_the_protocol(honest):
    outcome, request, _ = honest

    def same_offsets(message):
        if message.data["type"] == "call":
            message.data["offsets"] = [0, 0, 0]

    report = verdict(tampered(outcome, same_offsets), request)
    assert not report.correct and "does not follow the protocol" in report.failure


def test_a_time_below_the_roofline_is_rejected(honest):
    outcome, request, _ = honest
    floors = dataclasses.replace(request, floors_ms=[1e9] * len(request.floors_ms))
    report = verdict(outcome, floors)
    assert not report.correct and "faster than the roofline allows" in report.failure


def test_a_report_without_its_end_is_rejected(honest):
    outcome, request, _ = honest
    cut = copy.deepcopy(outcome)
    cut.messages = [m for m in cut.messages if m.data["type"] != "done"]
    report = verdict(cut, request)
    assert not report.correct and "without finishing its report" in report.failure


def test_a_malformed_message_is_a_corrupted_channel_not_a_crash(honest):
    outcome, request, _ = honest

    def wrong_types(message):
        if message.data["type"] == "call":
            message.data["call"] = "one"
        if message.data["type"] == "rejected":
            message.data["index"] = 99

    report = verdict(tampered(outcome, wrong_types), request)
    assert not report.correct and "corrupted the harness channel" in report.failure


@pytest.fixture(scope="module")
def screened():
    """(outcome, request, report) of a check screened against reused speed-reference times, never confirmed."""
    options = CheckOptions(scenario_set="quick", rounds=5, reference_reuse_s=600)
    slot = Slot()
    try:
        first = check_kernel(TASK.original, TASK, options, slot)  # interleaved: nothing to reuse yet
        outcome, request, report = recorded_check(options, slot)
    finally:
        slot.close()
    assert first.correct and not first.reference_reused, first.failure
    assert report.correct and report.reference_reused, report.failure
    assert [s.original_time_ms for s in report.scenarios] == [s.original_time_ms for s in first.scenarios]
    return outcome, request, report


def test_a_screened_report_passes_as_screened(screened):
    outcome, request, report = screened
    again = verdict(outcome, request)
    assert again.correct and again.reference_reused
    assert again.geomean_speedup == pytest.approx(report.geomean_speedup)


def test_a_worker_may_not_skip_the_interleaved_timing_its_screening_called_for(screened):
    """The worker decides from its own (untrusted) process whether to confirm; the parent applies the same
    rule to the times it accepted, so a screened-only report above the threshold is refused."""
    outcome, request, report = screened
    demanding = dataclasses.replace(request, confirm_above=report.geomean_speedup * 0.9)
    refused = verdict(outcome, demanding)
    assert not refused.correct and "that timing is missing" in refused.failure
    lenient = dataclasses.replace(request, confirm_above=report.geomean_speedup * 1.1)
    assert verdict(outcome, lenient).correct


def test_screened_calls_count_only_against_reused_times(screened):
    """Screening calls (the candidate alone) in a check that reused nothing give no speedup."""
    outcome, request, _ = screened
    report = verdict(outcome, dataclasses.replace(request, reference_ms=None))
    assert not report.correct and "no timed calls of the candidate" in report.failure


def test_every_scenario_carries_sampled_elements_of_a_fixed_number_of_timed_calls(honest):
    """Sampled elements of SAMPLED_CALLS timed calls a scenario (all of them where there are fewer), whatever
    the calls per request: the parent checks one of them, chosen after the fact."""
    from collections import Counter

    from evokernel.harness.worker import SAMPLED_CALLS

    outcome, _, _ = honest
    calls = [m.data for m in outcome.messages if m.data["type"] == "call" and m.data["kernel"] == "candidate"]
    per_scenario, with_rows = Counter(c["index"] for c in calls), Counter(c["index"] for c in calls if c["rows"])
    assert per_scenario and all(with_rows[index] == min(SAMPLED_CALLS, count) for index, count in per_scenario.items())


def test_a_report_says_where_the_checks_time_went_with_each_phases_parts(honest):
    _, _, report = honest
    assert {"verification: kernels", "timing: requests", "timing: checks"} <= set(report.phase_seconds)
    whole = sum(v for k, v in report.phase_seconds.items() if ": " not in k)
    assert whole <= report.check_seconds + 0.5  # the parts are inside their phases, not added to them
    summary = report.phase_summary()
    assert "timing: " not in summary and "verification " in summary and "(kernels " in summary, summary
