"""A task without an original kernel: `evokernel task new --from-module FILE` with no first kernel writes one
that says so, its speed reference is PyTorch eager (never `original`), a run of it without a model says in one
line what it needs, and a search with a model starts from a kernel the first-kernel operator writes from the
reference (a rejected one sent back with its reason), its question from the bank's `reference` layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import parse_config
from evokernel.errors import BadInput
from evokernel.harness import get_task
from evokernel.store import Store

pytest.importorskip("torch")
MODULES = Path(__file__).resolve().parent.parent / "examples" / "modules"
KERNEL = (MODULES / "row_softmax.c").read_text()
SKIPS_LAST_ROW = KERNEL.replace("r < rows;", "r < rows - 1;")


@pytest.fixture(scope="module")
def softmax(tmp_path_factory) -> Path:
    """A task made from examples/modules/row_softmax.py without a first kernel."""
    directory = tmp_path_factory.mktemp("tasks") / "row-softmax"
    made = CliRunner().invoke(main, ["task", "new", "row-softmax", "--from-module", str(MODULES / "row_softmax.py"),
                                     "-o", str(directory)])
    assert made.exit_code == 0, made.output
    assert "no original kernel: a model writes the first one in a search" in made.output
    return directory


def test_a_task_made_without_a_first_kernel_has_no_original_and_is_timed_against_pytorch(softmax, tmp_path):
    assert sorted(p.name for p in softmax.iterdir()) == ["config.yaml", "evk_row_softmax.h", "module.py", "task.py"]
    assert "    original_file = None\n" in (softmax / "task.py").read_text()
    task = get_task(str(softmax))
    assert not task.has_original and task.default_speed_reference == "torch"
    (tmp_path / "mine.c").write_text(KERNEL)
    report = tmp_path / "report.json"
    checked = CliRunner().invoke(main, ["check", str(tmp_path / "mine.c"), "--task", str(softmax), "--no-time",
                                        "--json", str(report)])
    assert checked.exit_code == 0, checked.output
    assert json.loads(report.read_text())["speed_reference"] == "torch"


def test_where_an_original_is_needed_a_task_without_one_is_one_line(softmax, tmp_path):
    (tmp_path / "mine.c").write_text(KERNEL)
    checked = CliRunner().invoke(main, ["check", str(tmp_path / "mine.c"), "--task", str(softmax), "--original",
                                        "original"])
    assert checked.exit_code == 2
    assert checked.output.strip().splitlines() == [
        "error: --original: task row-softmax has no original kernel: name one of its library baselines "
        "(torch, compile; default torch) or a kernel file"]
    with pytest.raises(BadInput, match=r"^run.yaml: field 'speed_reference': task row-softmax has no original kernel"):
        parse_config({"task": str(softmax), "speed_reference": "original"}, "run.yaml")
    assert parse_config({"task": str(softmax)}, "run.yaml").speed_reference == "torch"


def test_a_run_without_a_model_says_what_it_needs_and_writes_nothing(softmax, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--task", str(softmax), "--budget", "2", "--runs-dir", "runs"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: task row-softmax has no original kernel: a model writes the first one (--model MODEL or llm.models "
        "in the config), or give your own (--seed-kernel FILE or seeds)")
    assert not (tmp_path / "runs").exists()


def test_a_search_starts_from_the_first_kernel_a_model_writes_and_fixes(softmax, tmp_path, local_ray, monkeypatch):
    from fake_llm_server import FakeLLMServer

    variants = [KERNEL.replace("  const long long rows", f"  const int unroll_{n} = {n};\n  (void)unroll_{n};\n"
                                                        "  const long long rows") for n in range(1, 9)]
    answers = ([f"A first version.\n```c\n{SKIPS_LAST_ROW}```\n", f"Every row now.\n```c\n{KERNEL}```\n"]
               + [f"A variant.\n```c\n{v}```\n" for v in variants])
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(answers) as server:
        searched = CliRunner().invoke(main, ["run", "--task", str(softmax), "--budget", "3", "--model", "openai/fake",
                                             "--api-base", server.api_base, "--no-llm-check", "--runs-dir", "runs"])
        prompts = [request["messages"][0]["content"] for request in server.requests]
    assert searched.exit_code == 0, searched.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    with Store(run_dir, readonly=True) as store:
        rows = [row for row in store.individuals() if row.status in ("correct", "rejected")]
        speed_reference = store.meta()["config"]["speed_reference"]
    first, fixed, later = rows
    assert (first.operator, first.status, first.parent_ids) == ("first-kernel", "rejected", [])
    assert (fixed.operator, fixed.status, fixed.parent_ids) == ("first-kernel", "correct", [first.id])
    assert first.question_id == fixed.question_id == "plain-kernel-from-reference" and speed_reference == "torch"
    assert later.parent_ids == [fixed.id] and later.operator != "first-kernel"
    assert "return torch.softmax(x, dim=-1)" in prompts[0] and "Which plain kernel computes exactly" in prompts[0]
    assert "Your previous kernel, which the harness rejected" in prompts[1] and "r < rows - 1;" in prompts[1]
    lineage = CliRunner().invoke(main, ["lineage", str(run_dir), "--best"])
    assert lineage.exit_code == 0 and "first-kernel" in lineage.output and "Which plain kernel" in lineage.output


def test_a_seed_of_your_own_needs_no_model(softmax, tmp_path, local_ray, monkeypatch):
    (tmp_path / "mine.c").write_text(KERNEL)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--task", str(softmax), "--seed-kernel", "mine.c", "--budget", "1",
                                       "--runs-dir", "runs"])
    assert result.exit_code == 0, result.output
    # a seed without knobs and no model: the run says at once that it has nothing to change, and how to give it
    assert "nothing for the search to change: no model is configured" in result.output
    assert "// @knob v1,v2,..." in " ".join(result.output.split())
    (run_dir,) = (tmp_path / "runs").iterdir()
    with Store(run_dir, readonly=True) as store:
        assert [(row.operator, row.status) for row in store.individuals()] == [("seed", "correct")]
