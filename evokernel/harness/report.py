"""The harness's verdict on one candidate: what `evokernel check --json` writes and the store keeps."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

SCENARIO_NAME = re.compile(r"[\w.]+(-[\w.]+)+")  # d64-b1-h2-s33, fa3-2k: words joined by hyphens
NOT_COMPILED = "does not compile"  # in the reason of a kernel the compiler refused (its build log says why)


def did_not_compile(failure: str | None) -> bool:
    """Whether a rejection's reason is the compiler's: only then does the build log hold the error."""
    return NOT_COMPILED in (failure or "")


def rejection_kind(failure: str | None, scenario_names: Collection[str] = ()) -> str:
    """The kind of a rejection, for counting and grouping (the live display, the summary, the report): the
    reason's first line without the scenario it happened in, the compiler's message, what follows "during"
    or "after", quoted names and numbers, so that rejections differing only there count together."""
    text = ((failure or "").strip().splitlines() or [""])[0]
    prefix, colon, rest = text.partition(": ")
    if colon and (prefix in scenario_names or SCENARIO_NAME.fullmatch(prefix)):
        text = rest
    if did_not_compile(text):
        return text.split(":", 1)[0]
    text = re.split(r" during | after ", text, maxsplit=1)[0]
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", text)
    return text.strip()[:100] or "(no reason recorded)"


@dataclass
class ScenarioResult:
    """Correctness and speed of the candidate on one scenario."""

    name: str
    correct: bool = False
    rel_err: float | None = None  # ||cand - ref|| / ||ref|| against the high-precision reference
    max_err: float | None = None  # max |cand - ref|
    tolerance: float | None = None  # the bound max_err had to meet
    time_ms: float | None = None  # median candidate time
    original_time_ms: float | None = None  # median time of the speed reference
    speedup: float | None = None  # original_time_ms / time_ms
    spread: float | None = None  # interquartile range of candidate times / median
    calls_per_request: int | None = None  # the candidate's calls in one timed request (each on inputs of its own)
    suspicious: bool = False  # faster than the roofline floor allows, also when re-timed (then rejected)
    error: str | None = None  # why this scenario failed
    baselines_ms: dict[str, float | None] = field(default_factory=dict)


@dataclass
class CheckReport:
    """The whole verdict: correct only if every scenario is; speedup only when correct."""

    task: str
    kernel: str
    scenario_set: str
    correct: bool = False
    geomean_speedup: float | None = None
    failure: str | None = None  # first reason for rejection, null when correct
    speed_reference: str = "original"
    reference_reused: bool = False  # speedups against the speed reference's times of an earlier check on this GPU
    scenarios: list[ScenarioResult] = field(default_factory=list)
    build_seconds: float | None = None
    build_log: str = ""
    check_seconds: float | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)  # build, worker start, verification, timing
    seed: int | None = None
    device: str | None = None
    suspicious: bool = False
    baseline_geomeans: dict[str, float | None] = field(default_factory=dict)
    isolation: str | None = None  # how the candidate was isolated on this machine, or why it was not

    def reject(self, reason: str) -> "CheckReport":
        """Mark the candidate infeasible (keeps the first reason)."""
        self.correct = False
        self.geomean_speedup = None
        self.failure = self.failure or reason
        return self

    def phase_summary(self) -> str:
        """Where the check's time went, each phase with its parts: "build 0.0, worker start 5.2, verification 17.1
        (kernels 9.0, references 1.0), timing 11.7 (requests 4.1, inputs 0.2, checks 5.3)"."""
        parts: dict[str, list[str]] = {}
        for name, seconds in self.phase_seconds.items():
            phase, _, part = name.partition(PART)
            if part:
                parts.setdefault(phase, []).append(f"{part} {seconds:.1f}")
        return ", ".join(f"{name} {seconds:.1f}" + (f" ({', '.join(parts[name])})" if name in parts else "")
                         for name, seconds in self.phase_seconds.items() if PART not in name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CheckReport":
        data = dict(data)
        data["scenarios"] = [ScenarioResult(**s) for s in data.get("scenarios", [])]
        return cls(**data)


PART = ": "  # "timing: requests" is a part of the phase "timing" (inside its time, not added to it)


def whole_phases_seconds(phases: dict[str, float]) -> float:
    """The time of the phases themselves, their parts not counted twice."""
    return sum(seconds for name, seconds in phases.items() if PART not in name)


def geomean(values: list[float]) -> float | None:
    """Geometric mean of positive numbers; None when there are none."""
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
