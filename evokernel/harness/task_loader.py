"""Finding and loading tasks: a built-in name, or a task directory anywhere (see `evokernel.harness.task`).

A task is checked as it is loaded, so that a wrong or missing part is one line naming the part, not a
traceback in the middle of a check.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import inspect
import sys
from functools import lru_cache
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.harness.languages import LANGUAGES
from evokernel.harness.task import DTYPES, SCALAR_TYPES, Scalar, Task, Tensor

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "builtin_tasks"
REQUIRED_FIELDS = ("name", "language", "header_file", "original_file", "entry", "dtype", "scenario_type", "scenario_sets",
                   "peak_flops", "peak_bytes_per_s")
REQUIRED_METHODS = ("arguments", "reference", "reference_at", "flops")
CPU_DTYPES = ("float32",)


def _task_dirs(root: Path) -> list[Path]:
    """`root` itself when it is a task directory, else its subdirectories that are."""
    if (root / "task.py").is_file():
        return [root]
    return sorted(p for p in root.iterdir() if (p / "task.py").is_file()) if root.is_dir() else []


def builtin_tasks() -> dict[str, Task]:
    tasks = [load_task_dir(path) for path in _task_dirs(BUILTIN_DIR)]
    return {task.name: task for task in tasks}


def tasks_in(directory: Path) -> list[Task]:
    """Every task in `directory` (a task directory, or a folder of them)."""
    if not directory.is_dir():
        raise BadInput(f"task directory not found: {directory}")
    found = _task_dirs(directory)
    if not found:
        raise BadInput(f"{directory} holds no task (no task.py in it or in its subdirectories)")
    return [load_task_dir(path) for path in found]


def get_task(reference: str | Path) -> Task:
    """A task by built-in name (`attention-fwd`) or by the path of its directory."""
    text = str(reference)
    builtin = builtin_tasks()
    if text in builtin:
        return builtin[text]
    path = Path(text).expanduser()
    if path.is_dir() or "/" in text or text.startswith("."):
        if not (path / "task.py").is_file():
            raise BadInput(f"task directory {path}: no task.py in it" if path.is_dir()
                           else f"task directory not found: {path}")
        return load_task_dir(path)
    raise BadInput(f"unknown task '{text}' (known: {', '.join(sorted(builtin))}; or a task directory)")


def task_names() -> list[str]:
    return sorted(builtin_tasks())


def load_task_dir(directory: Path) -> Task:
    return _load(directory.resolve())


@lru_cache(maxsize=None)
def _load(directory: Path) -> Task:
    where = f"task {directory}"
    module_name = "evokernel_task_" + hashlib.sha256(str(directory).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(module_name, directory / "task.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise BadInput(f"{where}: task.py does not load: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                       ) from None
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, Task) and c.__module__ == module_name]
    if len(classes) != 1:
        raise BadInput(f"{where}: task.py must define exactly one subclass of evokernel.harness.task.Task "
                       f"(found {len(classes)})")
    task = classes[0]()
    task.directory = directory
    _validate(task, f"{where} ({getattr(task, 'name', '?')})")
    return task


def _validate(task: Task, where: str) -> None:
    for name in REQUIRED_FIELDS:
        if not hasattr(task, name):
            raise BadInput(f"{where}: field '{name}' is missing")
    for name in REQUIRED_METHODS:
        if getattr(type(task), name) is getattr(Task, name):
            raise BadInput(f"{where}: method '{name}' is not defined")
    if task.language not in LANGUAGES:
        raise BadInput(f"{where}: field 'language': '{task.language}' is not one of {', '.join(LANGUAGES)}")
    if task.dtype not in DTYPES or (task.language == "c" and task.dtype not in CPU_DTYPES):
        allowed = CPU_DTYPES if task.language == "c" else tuple(DTYPES)
        raise BadInput(f"{where}: field 'dtype': '{task.dtype}' is not one of {', '.join(allowed)} "
                       f"(language {task.language})")
    for field in ("header_file", "original_file") if task.has_original else ("header_file",):
        if not (task.directory / getattr(task, field)).is_file():
            raise BadInput(f"{where}: field '{field}': file not found: {task.directory / getattr(task, field)}")
    if task.has_original:
        _validate_original(task, where)
    if not dataclasses.is_dataclass(task.scenario_type):
        raise BadInput(f"{where}: field 'scenario_type': not a dataclass")
    if not isinstance(task.scenario_sets, dict) or not task.scenario_sets:
        raise BadInput(f"{where}: field 'scenario_sets': expected a mapping of set names to scenarios")
    for set_name, scenarios in task.scenario_sets.items():
        _validate_set(task, f"{where}: scenario set '{set_name}'", scenarios)


def _validate_original(task: Task, where: str) -> None:
    extension = LANGUAGES[task.language].extension
    if task.original.suffix != extension:
        raise BadInput(f"{where}: field 'original_file': a {task.language} kernel ends in {extension}")
    if task.entry not in task.original.read_text(errors="replace"):
        raise BadInput(f"{where}: field 'entry': the original kernel does not define '{task.entry}'")


def _validate_set(task: Task, where: str, scenarios) -> None:
    if not isinstance(scenarios, (tuple, list)) or not scenarios:
        raise BadInput(f"{where}: expected a non-empty tuple of scenarios")
    names = set()
    for scenario in scenarios:
        if not isinstance(scenario, task.scenario_type):
            raise BadInput(f"{where}: {scenario!r} is not a {task.scenario_type.__name__}")
        name = getattr(scenario, "name", None)
        if not isinstance(name, str) or not name:
            raise BadInput(f"{where}: {task.scenario_type.__name__} has no 'name' (a non-empty string)")
        if name in names:
            raise BadInput(f"{where}: two scenarios are named '{name}'")
        names.add(name)
        try:
            _validate_arguments(task.arguments(scenario))
        except (BadInput, TypeError, ValueError) as exc:
            raise BadInput(f"{where}: arguments({name}): {exc}") from None


def _validate_arguments(arguments) -> None:
    if not isinstance(arguments, (list, tuple)) or not all(isinstance(a, (Tensor, Scalar)) for a in arguments):
        raise BadInput("expected a list of Tensor and Scalar")
    names = [a.name for a in arguments]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        raise BadInput(f"argument names must be distinct identifiers ({', '.join(names)})")
    tensors = [a for a in arguments if isinstance(a, Tensor)]
    if not any(t.output for t in tensors) or all(t.output for t in tensors):
        raise BadInput("needs at least one input tensor and one output tensor")
    for tensor in tensors:
        if not tensor.shape or not all(isinstance(d, int) and d > 0 for d in tensor.shape):
            raise BadInput(f"tensor '{tensor.name}' has shape {tensor.shape} (positive integers expected)")
        if tensor.roll_axis is not None and not 0 <= tensor.roll_axis < len(tensor.shape):
            raise BadInput(f"tensor '{tensor.name}': roll_axis {tensor.roll_axis} is not an axis of {tensor.shape}")
    for scalar in (a for a in arguments if isinstance(a, Scalar)):
        if scalar.ctype not in SCALAR_TYPES:
            raise BadInput(f"scalar '{scalar.name}': ctype '{scalar.ctype}' is not one of {', '.join(SCALAR_TYPES)}")
