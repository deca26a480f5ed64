"""The harness: builds a candidate kernel, verifies it against a reference and the task's original
kernel on every scenario, times it against a speed reference and scores it (gated geomean).

Interface: `check_kernel`, `check_source`, `build_checked`, `prepare_slot` (a search slot's first worker
started while its first kernels compile), `CheckOptions`, `CheckReport`, `ScenarioResult`,
`rejection_kind` (what kind of rejection a reason is, for counting), `did_not_compile` (whether the
compiler refused it), `Slot` (what an evaluation slot keeps between its checks), `BackendProfile` and
`profile_of` (what differs between kinds of device), `get_task`, `task_names`, `tasks_in`, `SpeedReference`
(what speedups are over), `show_source_paths` (a compiler message naming the kernel's own file), `isolation`
(what this machine enforces), `LANGUAGES` (what differs between kernel languages), and the task interface
(`Task`, `Tensor`, `Scalar`, `Baseline`) a task directory implements.
"""

from evokernel.harness.build import show_source_paths
from evokernel.harness.check import CheckOptions, build_checked, check_kernel, check_source, prepare_slot
from evokernel.harness.languages import LANGUAGES, Language
from evokernel.harness.profiles import BackendProfile, profile_of
from evokernel.harness.report import CheckReport, ScenarioResult, did_not_compile, geomean, rejection_kind
from evokernel.harness.sandbox import Isolation, isolation
from evokernel.harness.slot import Slot
from evokernel.harness.speed_reference import SpeedReference
from evokernel.harness.task import Baseline, Scalar, Task, Tensor
from evokernel.harness.task_loader import get_task, task_names, tasks_in

__all__ = ["LANGUAGES", "BackendProfile", "Baseline", "CheckOptions", "CheckReport", "Isolation", "Language", "Scalar", "ScenarioResult", "Slot", "SpeedReference", "Task", "Tensor",
           "build_checked", "check_kernel", "check_source", "did_not_compile", "geomean", "get_task", "isolation", "prepare_slot", "profile_of", "rejection_kind",
           "show_source_paths", "task_names", "tasks_in"]
