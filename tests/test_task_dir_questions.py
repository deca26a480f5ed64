"""Question operators on a task given as a directory: the prompt is built from the loaded task, never by
looking its name up among the built-in tasks (a copied task directory has a name no built-in has)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import yaml

from evokernel.config import load_config
from evokernel.harness import get_task
from evokernel.mutations import Context, Parent, registered_operators
from evokernel.mutations.operators.questions import build_services
from evokernel.store import Store
from fake_llm_server import FakeLLMServer

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "rmsnorm_cpu"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


def copied_task(tmp_path: Path) -> Path:
    """The example task under another name, in a directory of its own (as a user's task)."""
    directory = tmp_path / "mytask"
    shutil.copytree(EXAMPLE, directory)
    task_py = directory / "task.py"
    task_py.write_text(task_py.read_text().replace('name = "rmsnorm-cpu"', 'name = "my-rmsnorm"'))
    return directory


def test_llm_operators_work_on_a_copied_task_directory(tmp_path):
    directory = copied_task(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": "mytask", "scenarios": "quick"}))
    config = load_config(tmp_path / "config.yaml")  # a bare directory name beside the config is that directory
    task = get_task(config.task)
    assert task.name == "my-rmsnorm" and Path(config.task) == directory.resolve()
    original = task.original.read_text()
    child = original.replace("#define UNROLL 4 ", "#define UNROLL 8 ")
    failing = {"correct": False, "failure": "does not compile", "build_log": "original.c:3: error: x", "scenarios": []}
    answers = [f"```c\n{child}```", f"```c\n{child}```", f"```c\n{original}```"]
    with FakeLLMServer(answers) as server, Store(tmp_path / "run", create=True) as store:
        config.llm = config.llm.model_validate({"models": [{"model": "openai/fake", "api_base": server.api_base}],
                                                "retry_backoff_s": 0, "max_retries": 0})
        services = build_services(config, store)
        context = Context(rng=random.Random(0), task=task, store=store, services=services)
        registry = registered_operators()
        parent = Parent(id=1, source=original, fitness=1.0)
        other = Parent(id=2, source=child, fitness=1.1)
        proposals = [registry["question-mutation"].factory(config)([parent], context),
                     registry["question-crossover"].factory(config)([parent, other], context),
                     registry["repair"].factory(config)([Parent(id=3, source=original, fitness=None,
                                                                report=failing)], context)]
        prompts = [request["messages"][0]["content"] for request in server.requests]
    assert [p.operator for p in proposals] == ["question-mutation", "question-crossover", "repair"]
    assert proposals[0].source == child and len(prompts) == 3
    assert all("task my-rmsnorm" in prompt and "evk_rmsnorm" in prompt for prompt in prompts)
