"""The replay evaluator: recorded check reports served again, with no harness and no device.

It answers a kernel with the report recorded for the same kernel (the same source after removing
comments and whitespace, the store's normalized hash) of the same task, scenario set and speed
reference, so search logic can be exercised on a machine without the GPU the reports were measured on.
A kernel never recorded gets a rejected report, failure `not in the replayed evaluations`. Reports
come from an earlier run's `lineage.db`, or from a directory of kernels with their `evokernel check
--json` reports (`k1.cu` beside `k1.json`). Replayed reports are not measurements made now, so the
search does not re-time its best kernel (`measures` is False).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evokernel.config import ResourceConfig
from evokernel.errors import BadInput, read_text
from evokernel.evaluation import Evaluator, Finished, rejection
from evokernel.harness import CheckOptions, CheckReport, get_task
from evokernel.store import DB_NAME, open_readonly
from evokernel.source import normalized_hash

NOT_RECORDED = "not in the replayed evaluations"
FIELD = "field 'resources.replay_evaluations'"


@dataclass
class _Call:
    key: Any
    report: dict
    started_at: float


def _from_run(run_dir: Path) -> dict[str, dict]:
    """Reports of a run's finished evaluations, by normalized hash (the first evaluation of a kernel wins)."""
    with open_readonly(run_dir) as store:
        rows = store.individuals()
    return {row.normalized_hash: row.report for row in reversed(rows)
            if row.status in ("correct", "rejected") and row.report is not None}


def _from_reports(directory: Path) -> dict[str, dict]:
    """Reports of `evokernel check --json` in `directory`, by the normalized hash of the kernel beside each."""
    found = {}
    for path in sorted(directory.glob("*.json")):
        try:
            report = CheckReport.from_dict(json.loads(read_text(path, "check report"))).to_dict()
        except (ValueError, TypeError, AttributeError):
            raise BadInput(f"{FIELD}: {path} is not a report of `evokernel check --json`") from None
        kernels = [p for p in path.parent.glob(f"{path.stem}.*") if p.suffix != ".json" and p.is_file()]
        if len(kernels) != 1:
            raise BadInput(f"{FIELD}: {path} needs exactly one kernel file beside it named {path.stem}.* "
                           f"(found {len(kernels)})")
        found[normalized_hash(read_text(kernels[0], "kernel"))] = report
    return found


def recorded_reports(path: Path) -> dict[str, dict]:
    """The reports recorded at `path` (a run directory or a directory of check reports), by normalized hash."""
    if (path / DB_NAME).is_file():
        return _from_run(path)
    if path.is_dir():
        return _from_reports(path)
    raise BadInput(f"{FIELD}: {path} is neither a run directory (with {DB_NAME}) nor a directory of check reports")


def _measured_on(report: dict) -> tuple[str, str, str]:
    """What a report's figures are relative to: task, scenario set, speed reference."""
    return report["task"], report["scenario_set"], report.get("speed_reference", "original")


class ReplayEvaluator(Evaluator):
    """Answers each kernel at once with its recorded report; `slots` only shapes the search as a pool would."""

    measures = False

    def __init__(self, reports: dict[str, dict], task_name: str, options: CheckOptions, slots: int) -> None:
        super().__init__(slots)
        self.reports = reports
        self.task_name = task_name
        self.options = options
        self.submitted = 0

    @classmethod
    def start(cls, resources: ResourceConfig, task: str, options: CheckOptions) -> "ReplayEvaluator":
        """The reports at `resources.replay_evaluations` of this task, scenario set and speed reference; none is
        a one-line error naming what the place holds instead."""
        path = resources.replay_evaluations
        task_name = get_task(task).name
        recorded = recorded_reports(path)
        wanted = (task_name, options.scenario_set, options.speed_reference)
        matching = {digest: report for digest, report in recorded.items() if _measured_on(report) == wanted}
        if not matching:
            held = sorted({_measured_on(report) for report in recorded.values()})
            holds = "; ".join(f"task {t}, scenarios '{s}', speed reference {r}" for t, s, r in held) or "nothing"
            raise BadInput(f"{FIELD}: {path} holds no report of task {task_name}, scenarios '{options.scenario_set}', "
                           f"speed reference {options.speed_reference} (it holds: {holds})")
        return cls(matching, task_name, options, resources.max_parallel or 1)

    def submit(self, key: Any, source: str, label: str, options: CheckOptions | None = None) -> None:
        report = self.reports.get(normalized_hash(source))
        if report is None:
            report = rejection(self.task_name, label, self.options, NOT_RECORDED)
        else:
            report = {**report, "kernel": label}
        self.submitted += 1
        self.calls[self.submitted] = _Call(key, report, self._started())

    def wait(self, timeout: float) -> list[Finished]:
        finished = [Finished(call.key, call.report, "replay", call.started_at, self._ended(call.started_at))
                    for call in self.calls.values()]
        self.calls = {}
        return finished
