"""The harness: builds a candidate kernel, verifies it against a reference and the task's original
kernel on every scenario, times it against a speed reference and scores it (gated geomean).

Interface: `check_kernel`, `check_source`, `CheckOptions`, `CheckReport`, `ScenarioResult`,
`get_task`, `task_names`, `speed_reference_label`, `isolation` (what this machine enforces).
"""

from evokernel.harness.check import CheckOptions, check_kernel, check_source, speed_reference_label
from evokernel.harness.report import CheckReport, ScenarioResult, geomean
from evokernel.harness.sandbox import Isolation, isolation
from evokernel.harness.tasks import Scenario, Task, get_task, task_names

__all__ = ["CheckOptions", "CheckReport", "Isolation", "Scenario", "ScenarioResult", "Task", "check_kernel",
           "check_source", "geomean", "get_task", "isolation", "speed_reference_label", "task_names"]
