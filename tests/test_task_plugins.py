"""Tasks as plug-in directories: the example RMSNorm task, copied to a temporary place the package knows
nothing about, is checked and searched like a built-in one; a task with a wrong or missing part is a
one-line error naming the part; cheats on a task with two outputs are caught like on attention."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.harness import CheckOptions, check_source, get_task
from evokernel.store import Store

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "rmsnorm_cpu"


@pytest.fixture
def task_dir(tmp_path) -> Path:
    target = tmp_path / "my_tasks" / "rmsnorm_cpu"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_check_of_a_task_directory_from_anywhere(task_dir, tmp_path):
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["check", str(task_dir / "original.c"), "--task", str(task_dir),
                                       "--scenarios", "all", "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert report["task"] == "rmsnorm-cpu" and report["correct"]
    assert [s["name"] for s in report["scenarios"]] == [s.name for s in get_task(task_dir).scenarios("all")]
    assert all(s["speedup"] > 0 for s in report["scenarios"])


def test_tasks_lists_a_task_directory(task_dir):
    result = CliRunner().invoke(main, ["tasks", "--task-dir", str(task_dir.parent)])
    assert result.exit_code == 0, result.output
    assert "rmsnorm-cpu" in result.output and str(task_dir) in result.output and "attention-fwd" in result.output


def test_a_short_search_on_a_task_directory_named_relative_to_its_config(task_dir, tmp_path, local_ray):
    config = task_dir.parent.parent / "config.yaml"
    config.write_text(yaml.safe_dump({"task": "./my_tasks/rmsnorm_cpu", "scenarios": "quick", "trials": 1,
                                      "population_size": 4, "random_seed": 3,
                                      "resources": {"max_parallel": 1, "evaluation_timeout_s": 60}}))
    runs = tmp_path / "runs"
    result = CliRunner().invoke(main, ["run", str(config), "--budget", "4", "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    (run_dir,) = runs.iterdir()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["task"] == str(task_dir)
    with Store(run_dir, readonly=True) as store:
        rows = [row for row in store.individuals() if row.status in ("correct", "rejected")]
    assert len(rows) == 4 and any(row.status == "correct" and row.operator == "seed" for row in rows)
    assert any(row.status == "correct" and row.operator.startswith("knob") for row in rows)


BROKEN = [
    ("header_file", lambda text: text.replace('header_file = "evk_rmsnorm_cpu.h"', 'header_file = "missing.h"'),
     "field 'header_file': file not found"),
    ("language", lambda text: text.replace('language = "c"', 'language = "fortran"'), "field 'language'"),
    ("entry", lambda text: text.replace('entry = "evk_rmsnorm"', 'entry = "evk_other"'), "field 'entry'"),
    ("no entry field", lambda text: text.replace('    entry = "evk_rmsnorm"\n', ''), "field 'entry' is missing"),
    ("no reference", lambda text: text.replace("def reference(", "def other_reference("),
     "method 'reference' is not defined"),
    ("no outputs", lambda text: text.replace("output=True", "output=False"), "one output tensor"),
    ("empty set", lambda text: text.replace('"quick": (Shape(7, 64), Shape(33, 1000), Shape(1, 768)),', '"quick": (),'),
     "scenario set 'quick': expected a non-empty tuple"),
    ("import error", lambda text: text.replace("import numpy as np", "import numpy as np\nimport not_a_module"),
     "task.py does not load: ModuleNotFoundError"),
    ("two tasks", lambda text: text + "\n\nclass Another(RMSNormCpu):\n    name = 'x'\n", "exactly one subclass"),
]


@pytest.mark.parametrize("part, change, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_task_with_a_wrong_or_missing_part_is_one_line_naming_it(task_dir, part, change, message):
    task_py = task_dir / "task.py"
    task_py.write_text(change(task_py.read_text()))
    result = CliRunner().invoke(main, ["check", str(task_dir / "original.c"), "--task", str(task_dir)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_unknown_task_and_a_missing_directory_are_one_line_errors(tmp_path):
    for task in ("no-such-task", str(tmp_path / "nowhere")):
        result = CliRunner().invoke(main, ["check", str(EXAMPLE / "original.c"), "--task", task])
        assert result.exit_code == 2 and "Traceback" not in result.output and "task" in result.output


ORIGINAL = (EXAMPLE / "original.c").read_text()
CHEATS = {
    # out is right, the second output is never written (a private row buffer instead)
    "skips residual_out": (ORIGINAL.replace("float* h = p->residual_out + (long)i * hidden;",
                                            "float h_row[8192];\n    float* h = h_row;"),
                           "left output residual_out unwritten"),
    # the sum written into its input instead of only into residual_out
    "writes into its input": (ORIGINAL.replace("h[j + u] = v;", "h[j + u] = v; ((float*)r)[j + u] = v;"),
                              "modified its inputs"),
    # one element past the end of the last row of out
    "writes past its output": (ORIGINAL.replace("  return 0;\n}", "  p->out[(long)rows * hidden] = 0.f;\n  return 0;\n}"),
                               "guard band around output out"),
}


@pytest.mark.parametrize("name", CHEATS)
def test_cheats_on_a_task_with_two_outputs_are_rejected(name, task_dir):
    source, reason = CHEATS[name]
    assert source != ORIGINAL
    report = check_source(source, str(task_dir), CheckOptions(scenario_set="quick", trials=2, rounds=5))
    assert not report.correct and reason in report.failure, report.failure


def test_run_takes_a_task_from_the_command_line_without_a_config(task_dir, tmp_path, local_ray, monkeypatch):
    monkeypatch.chdir(task_dir.parent)  # `rmsnorm_cpu` is a task directory here, as `check --task` takes it
    runs = tmp_path / "runs"
    result = CliRunner().invoke(main, ["run", "--task", "rmsnorm_cpu", "--budget", "3", "--population", "2",
                                       "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    assert "using the embedded default cpu.yaml" in result.output
    (run_dir,) = runs.iterdir()
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["task"] == str(task_dir) and config["seeds"] == [] and config["speed_reference"] == "original"
    assert config["scenarios"] == "quick" and config["name"] == "rmsnorm-cpu"
    with Store(run_dir, readonly=True) as store:
        seed = store.individual(1)
    assert seed.operator == "seed" and seed.status == "correct"


def test_every_spelling_of_a_task_directory_is_the_same_task(task_dir, monkeypatch):
    from evokernel.cli.run import _run_config

    monkeypatch.chdir(task_dir.parent)
    spellings = ["rmsnorm_cpu", "./rmsnorm_cpu", str(task_dir), "../my_tasks/rmsnorm_cpu"]
    configs = [_run_config(None, None, None, None, None, None, task=spelling) for spelling in spellings]
    assert {c.task for c in configs} == {str(task_dir)}
    builtin = _run_config(None, None, None, None, None, None, task="attention-fwd-cpu", scenarios="all")
    assert builtin.task == "attention-fwd-cpu" and builtin.scenarios == "all"
    seeded = _run_config(None, None, None, None, None, None, task="rmsnorm_cpu",
                         seed_kernels=(task_dir / "original.c",))
    assert seeded.seeds == [task_dir / "original.c"]


@pytest.mark.parametrize("args, message", [
    (["--task", "no_such_task"], "error: unknown task 'no_such_task'"),
    (["--task", "rmsnorm_cpu", "--seed-kernel", "missing.c"], "error: --seed-kernel missing.c: file not found"),
    (["--resume", "somewhere", "--task", "rmsnorm_cpu"], "error: --task: a resumed run keeps its own task and seeds"),
    (["--task", "rmsnorm_cpu", "--scenarios", "huge"], "error: --scenarios huge: "),
])
def test_a_bad_task_option_is_one_line_and_starts_nothing(task_dir, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(task_dir.parent)
    result = CliRunner().invoke(main, ["run", *args, "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("no CONFIG given")]
    assert len(lines) == 1 and lines[0].startswith(message), result.output
    assert not (tmp_path / "runs").exists()


def test_every_example_task_ships_a_config_for_its_own_directory():
    from evokernel.config import load_config

    examples = sorted(p for p in EXAMPLE.parent.iterdir() if (p / "task.py").is_file())
    assert len(examples) >= 2
    for directory in examples:
        config = load_config(directory / "config.yaml")
        assert Path(config.task) == directory and config.scenarios in get_task(directory).scenario_sets
