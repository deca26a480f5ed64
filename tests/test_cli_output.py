"""What the commands print for a new user: piped output one line per row with nothing cut, `--json`,
a kernel that does not compile, an export of a run without LLM calls, and `run`'s overrides."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evokernel.bank import load_bank
from evokernel.cli import main
from evokernel.cli.run import _run_config
from evokernel.errors import BadInput
from evokernel.harness import get_task
from evokernel.harness.build import show_source_paths
from evokernel.store import Store
from test_lineage_fixture import SCENARIOS, add, make_run

LONG_RUN_ID = "20261130T120000Z-attention-fwd-cpu-with-a-long-name"


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    make_run(tmp_path / "runs" / "demo")
    make_run(tmp_path / "runs" / LONG_RUN_ID)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def piped(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The command with its output piped (not a terminal), as in `evokernel ... | cat`."""
    environment = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env}
    environment.pop("COLUMNS", None)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        environment.pop(name, None)
    return subprocess.run([sys.executable, "-m", "evokernel.cli", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


def cli(*args: str, **env: str):
    return CliRunner().invoke(main, list(args), env=env)


# -- piped output: one line per row, nothing cut ----------------------------------------------------

def test_runs_piped_is_one_tab_separated_line_per_run(runs_dir):
    out = piped("runs", cwd=runs_dir.parent)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split("\t") == ["run", "status", "task", "evaluations", "best geomean", "cost $", "started",
                                    "failed proposals (operator: reason ×count)"]
    assert len(lines) == 3 and all(len(line.split("\t")) == 8 for line in lines)
    assert {line.split("\t")[0] for line in lines[1:]} == {"demo", LONG_RUN_ID}  # ids whole
    assert "attention-fwd-cpu" in lines[1] and "│" not in out.stdout and "━" not in out.stdout


def test_on_a_terminal_runs_is_still_a_table(runs_dir):
    result = cli("runs", TTY_COMPATIBLE="1", COLUMNS="200")
    assert result.exit_code == 0
    assert "runs under runs/" in result.output and "\t" not in result.output


def test_bank_list_piped_gives_one_line_per_question_that_grep_finds(tmp_path):
    out = piped("bank", "list", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    bank = load_bank()
    assert len(lines) == len(bank) + 1
    assert lines[0].split("\t")[:6] == ["id", "triggers", "layers", "devices", "needs", "text"]
    question = bank.get("coalescing-per-head-dim")
    [found] = [line for line in lines if question.text in line]  # what `grep` would find
    assert found.split("\t")[0] == question.id and found.split("\t")[3:5] == ["gpu", "attention"]


def test_show_piped_keeps_scenario_names_whole(runs_dir):
    out = piped("show", "demo", "3", cwd=runs_dir.parent)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines() if "\t" in line]
    assert [row[0] for row in rows if row[0] in SCENARIOS] == [*SCENARIOS, *SCENARIOS]  # results, then the deltas
    assert "…" not in out.stdout


# -- --json -----------------------------------------------------------------------------------------

def test_json_of_runs_lineage_show_and_bank(runs_dir):
    runs = json.loads(cli("runs", "--json").output)
    assert {r["id"] for r in runs} == {"demo", LONG_RUN_ID}
    demo = next(r for r in runs if r["id"] == "demo")
    assert (demo["evaluations"], demo["correct"], demo["best_id"], demo["path"]) == (7, 5, 6, "runs/demo")

    [trace] = json.loads(cli("lineage", "demo", "--json").output)
    assert trace["id"] == 6 and [s["id"] for s in trace["steps"]] == [1, 2, 3, 6]
    step = trace["steps"][2]
    assert step["question_id"] == "q-layer" and step["parent"] == 2 and step["ties"] == [SCENARIOS[1]]
    assert trace["steps"][3]["other_parents"] == [2]

    shown = json.loads(cli("show", "demo", "6", "--json").output)
    assert shown["parent_ids"] == [3, 2] and "int block = 80;" in shown["source"]
    assert [d["parent"] for d in shown["diffs"]] == [3, 2] and len(shown["scenarios"]) == 3
    assert shown["llm_call"] is None and shown["build_log"] == "gcc -O3 ok"
    rejected = json.loads(cli("show", "demo", "7", "--json").output)
    assert rejected["status"] == "rejected" and "does not compile" in rejected["failure"]
    assert rejected["scenarios"] == []

    questions = json.loads(cli("bank", "list", "--json").output)
    assert len(questions) == len(load_bank())
    assert {"id", "text", "triggers", "layers", "devices", "file"} <= set(questions[0])
    cpu = json.loads(cli("bank", "list", "--device", "cpu", "--json").output)
    assert 0 < len(cpu) < len(questions) and all(q["devices"] in ([], ["cpu"]) for q in cpu)


# -- a kernel that does not compile -----------------------------------------------------------------

@pytest.mark.parametrize("isolation", ["bubblewrap", "none"])
def test_check_of_a_kernel_that_does_not_compile_prints_the_reason_only(tmp_path, isolation):
    source = get_task("attention-fwd-cpu").original.read_text().replace("return 0;", "retur 0;", 1)
    (tmp_path / "broken.c").write_text(source)
    env = {"EVOKERNEL_CACHE": str(tmp_path / "cache")}
    if isolation == "none":
        env["EVOKERNEL_ISOLATION"] = "none"
    out = piped("check", "broken.c", "--task", "attention-fwd-cpu", "--json", "report.json", cwd=tmp_path, **env)
    assert out.returncode == 1, out.stdout + out.stderr
    text = out.stdout
    lines = text.splitlines()
    reason = next(n for n, line in enumerate(lines) if line.startswith("rejected: "))
    assert lines[reason].startswith("rejected: candidate does not compile: broken.c:")
    assert lines[reason + 1].startswith("  broken.c:") and "error" in lines[reason + 1]  # the compiler's first lines
    assert "retur 0;" in lines[reason + 2]
    assert "device None" not in text and "scenario" not in text and "┏" not in text and "│" not in text
    assert "/evk/scratch" not in text and str(tmp_path / "cache") not in text and "kernel.c" not in text
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["failure"].startswith("candidate does not compile: broken.c:") and "kernel.c" not in saved["build_log"]


def test_compiler_paths_are_shown_as_the_kernels_file():
    cached = "/root/.cache/evokernel/build/0123456789abcdef01234567.tmp4242/kernel.cu(12): error: x"
    assert show_source_paths(cached, "mine.cu") == "mine.cu(12): error: x"
    assert show_source_paths("/evk/scratch/kernel.c:3:1: error: y", "a.c") == "a.c:3:1: error: y"
    assert show_source_paths("kernel.c is fine", "a.c") == "kernel.c is fine"


def test_lineage_and_show_name_the_runs_source_file_in_compiler_messages(runs_dir):
    with Store(runs_dir / "demo") as store:
        broken = add(store, "knob-mutation", [1], "broken2", "4 +",
                     {"correct": False, "failure": "candidate does not compile: /evk/scratch/kernel.c:5:17: error: "
                                                   "expected expression before ';' token",
                      "build_log": "/evk/scratch/kernel.c:5:17: error: expected expression before ';' token",
                      "scenarios": []})
    with Store(runs_dir / "demo", readonly=True) as store:
        name = store.source_path(store.individual(broken).source_hash, "c").name
    tree = cli("lineage", "demo", "--tree").output
    line = next(line for line in tree.splitlines() if f"#{broken} " in line)
    assert line.endswith(f"rejected: candidate does not compile: sources/{name}:5:17: error: expected expression "
                         f"before ';' token")
    shown = cli("show", "demo", str(broken)).output
    assert "/evk/scratch" not in shown and f"sources/{name}:5:17" in shown


# -- export -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_of_a_run_without_llm_calls_or_results_writes_readable_tables(tmp_path, fmt):
    Store(tmp_path / "empty", create=True).close()
    result = cli("export", str(tmp_path / "empty"), "--format", fmt, "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    calls = read(tmp_path / "out" / f"llm_calls.{fmt}")
    assert len(calls) == 0 and {"model", "prompt", "cost_usd", "question_id"} <= set(calls.columns)
    assert {"name", "speedup"} <= set(read(tmp_path / "out" / f"scenario_results.{fmt}").columns)
    assert {"id", "fitness", "parent_ids"} <= set(read(tmp_path / "out" / f"individuals.{fmt}").columns)
    asked = read(tmp_path / "out" / f"human_questions.{fmt}")
    assert len(asked) == 0 and {"text", "target", "outcomes"} <= set(asked.columns)


def test_export_includes_the_questions_people_asked(tmp_path):
    from evokernel.store import HumanQuestion

    with Store(tmp_path / "run", create=True) as store:
        store.add_human_question(HumanQuestion(id="r1", question_id="human-1", text="Why not wgmma?", target="best",
                                               times=2, asked_at=1.0, asked_by="ann", outcomes=[{"child": 3}]))
    result = cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0 and "human_questions.csv: 1 rows" in result.output, result.output
    (row,) = pd.read_csv(tmp_path / "out" / "human_questions.csv").to_dict("records")
    assert (row["text"], row["asked_by"], row["times"], json.loads(row["outcomes"])) == \
        ("Why not wgmma?", "ann", 2, [{"child": 3}])


def test_pyarrow_is_a_core_dependency():
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("pyarrow") for dep in project["dependencies"])


# -- run overrides -----------------------------------------------------------------------------------

def test_run_overrides_are_applied_and_validated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _run_config(None, None, None, None, None, None, scenarios="all", random_seed=7, population=5,
                         wall_time="30m", usd=2.5)
    assert (config.scenarios, config.random_seed, config.population_size) == ("all", 7, 5)
    assert (config.budget.wall_time_s, config.budget.usd) == (1800.0, 2.5)
    assert _run_config(None, None, None, None, None, None, wall_time="1h30m").budget.wall_time_s == 5400.0
    assert _run_config(None, None, None, None, None, None, wall_time="90").budget.wall_time_s == 90.0
    for overrides, message in [({"population": 1}, "--population 1: Input should be greater than or equal to 2"),
                               ({"scenarios": "nope"}, "--scenarios nope: task attention-fwd-cpu has no scenario set"),
                               ({"wall_time": "soon"}, "--wall-time 'soon': expected seconds or a duration"),
                               ({"wall_time": "0"}, "--wall-time 0: Input should be greater than 0"),
                               ({"usd": -1.0}, "--usd -1.0: Input should be greater than or equal to 0")]:
        with pytest.raises(BadInput) as info:
            _run_config(None, None, None, None, None, None, **overrides)
        assert str(info.value).startswith(message), str(info.value)


def test_run_overrides_on_the_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    help_text = cli("run", "--help", COLUMNS="200").output
    for option in ("--scenarios", "--seed", "--population", "--wall-time", "--usd"):
        assert option in help_text, option
    result = cli("run", "--population", "1")
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith("error: --population 1:")
    result = cli("run", "--resume", str(tmp_path / "r"), "--scenarios", "all")
    assert result.exit_code == 2
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text("task: attention-fwd-cpu\n")
    result = cli("run", "--resume", str(tmp_path / "r"), "--scenarios", "all")
    assert result.exit_code == 2 and "a resumed run keeps its own" in result.output
    assert not (tmp_path / "runs").exists()  # nothing started


def test_a_run_prints_no_notices_of_the_ray_instance_it_starts(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "evokernel.cli", "run", "--budget", "1", "--runs-dir",
                           str(tmp_path / "runs")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    assert "run finished" in output
    assert "authentication" not in output.lower() and "Started a local Ray instance" not in output, output


@pytest.mark.parametrize("args, names", [
    (["lineage", "demo", "--top", "abc"], [" lineage: ", "--top", "abc", "lineage --help"]),
    (["run", "--budget", "x"], [" run: ", "--budget"]),
    (["show"], [" show: ", "Missing argument 'RUN'"]),
    (["bank", "nosuch"], [" bank: ", "No such command 'nosuch'"]),
    (["nosuch"], ["No such command 'nosuch'"]),
])
def test_a_bad_option_or_argument_is_one_line_and_exit_2(runs_dir, args, names):
    result = piped(*args, cwd=runs_dir.parent)
    assert result.returncode == 2 and result.stdout == "", result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(n in lines[0] for n in names), result.stderr


def test_show_names_the_runs_speed_reference_in_the_time_column(runs_dir):
    """A run timed against cuDNN shows a 'cudnn ms' column, not 'original ms'."""
    with Store(runs_dir / "demo") as store:
        store.set_meta("config", {"speed_reference": "cudnn"})
    out = piped("show", "demo", "1", cwd=runs_dir.parent, COLUMNS="200").stdout
    assert "cudnn ms" in out and "original ms" not in out, out
    default = piped("show", LONG_RUN_ID, "1", cwd=runs_dir.parent, COLUMNS="200").stdout
    assert "original ms" in default


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch")
def test_piped_show_and_diff_give_the_text_as_it_is_and_the_diff_applies(runs_dir, tmp_path):
    """Nothing folded at the console's width, nothing padded: a saved source is the kernel, a saved diff
    applies with `patch`."""
    long_line = "    const float scale_and_offset_for_every_row = " + " + ".join(f"p->row_{i}" for i in range(12)) + ";"
    with Store(runs_dir / "demo") as store:
        parent = add(store, "knob-mutation", [1], "wide", long_line, {"correct": False, "failure": "x", "scenarios": []})
        child = add(store, "knob-mutation", [parent], "wider", long_line.replace("row_3", "row_33"),
                    {"correct": False, "failure": "x", "scenarios": []})
    with Store(runs_dir / "demo", readonly=True) as store:
        sources = {i: store.source(store.individual(i)) for i in (parent, child)}
    shown = piped("show", "demo", str(child), cwd=runs_dir.parent)
    assert shown.returncode == 0, shown.stderr
    assert sources[child] in shown.stdout and len(long_line) > 120
    out = piped("diff", "demo", str(parent), str(child), cwd=runs_dir.parent)
    assert out.returncode == 0, out.stderr
    patch_text = out.stdout[:out.stdout.index("\nspeedup")] if "\nspeedup" in out.stdout else out.stdout
    assert not any(line != line.rstrip() for line in patch_text.splitlines() if line.strip())
    (tmp_path / "kernel.c").write_text(sources[parent])
    (tmp_path / "change.diff").write_text(patch_text)
    applied = subprocess.run(["patch", "-s", str(tmp_path / "kernel.c"), str(tmp_path / "change.diff")],
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (tmp_path / "kernel.c").read_text() == sources[child]


def test_a_gain_inside_the_spread_is_flagged_in_the_table_check_and_show_print():
    from evokernel.output import plain, scenario_table, within_noise

    assert within_noise(1.286, 0.30) and not within_noise(1.286, 0.10) and within_noise(0.9, 265.94)
    assert not within_noise(None, 0.3) and not within_noise(1.2, None)
    rows = [{"name": "a", "correct": True, "speedup": 1.286, "spread": 265.94, "time_ms": 1.0},
            {"name": "b", "correct": True, "speedup": 1.286, "spread": 0.02, "time_ms": 1.0}]
    columns, cells = scenario_table(rows)
    speedups = [plain(row[[c.name for c in columns].index("speedup")]) for row in cells]
    assert speedups == ["1.286 within noise", "1.286"]


def test_check_says_how_many_scenarios_are_within_their_noise(monkeypatch):
    from evokernel.harness import CheckReport, ScenarioResult

    report = CheckReport(task="t", kernel="k.c", scenario_set="quick", correct=True, geomean_speedup=1.286,
                         scenarios=[ScenarioResult("a", True, speedup=1.286, spread=265.94),
                                    ScenarioResult("b", True, speedup=1.286, spread=0.01)])
    monkeypatch.setattr("evokernel.harness.check_kernel", lambda *args, **kwargs: report)
    result = cli("check", __file__, "--task", "attention-fwd-cpu")
    assert "geomean speedup over the task's original kernel: 1.286 (1 of 2 scenarios within their noise" in result.output
