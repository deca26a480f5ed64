"""Lineage queries and the inspection commands (runs, lineage, show, diff, export) on a synthetic run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.errors import BadInput
from evokernel.harness import rejection_kind
from evokernel.lineage import Lineage, find_runs
from evokernel.lineage.statistics import best_over_evaluations, failures, llm_cost, question_stats, run_summary
from evokernel.store import Store, resolve_run
from test_lineage_fixture import QUESTION_TEXT, SCENARIOS, add, make_run, report


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    """./runs/demo holding the synthetic run, with the working directory at tmp_path."""
    make_run(tmp_path / "runs" / "demo")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def cli(*args: str):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "220"})


# -- the API --------------------------------------------------------------------------------------------

def test_ancestry_follows_primary_parents_with_per_scenario_verdicts(runs_dir):
    with Lineage.open("demo") as run:
        steps = run.ancestry(6)
        assert [s.individual.id for s in steps] == [1, 2, 3, 6]
        assert steps[0].parent is None and steps[0].deltas == []
        # #2 against the seed: 1.5 and 1.2 win, 0.95 loses.
        assert steps[1].wins == list(SCENARIOS[:2]) and steps[1].losses == [SCENARIOS[2]]
        # #3 against #2: 1.2 -> 1.2 is a tie.
        assert [d.verdict for d in steps[2].deltas] == ["win", "tie", "win"]
        assert steps[2].question_text == QUESTION_TEXT
        assert steps[3].other_parents == [2]
        assert math.isclose(steps[3].deltas[0].ratio, 2.2 / 2.0)


def test_a_rejected_child_shows_the_scenario_it_broke(runs_dir):
    with Lineage.open("demo") as run:
        verdicts = {d.name: d.verdict for d in run.compare(3, 4)}
        assert verdicts[SCENARIOS[1]] == "broke"
        assert SCENARIOS[2] not in verdicts  # the harness stopped at the first failure
        assert run.ancestry(5)[-1].parent.id == 4


def test_descendant_tree_marks_children_with_two_parents_once(runs_dir):
    with Lineage.open("demo") as run:
        tree = run.descendants(2)
        assert [c.individual.id for c in tree.children] == [3, 6]
        under3 = {c.individual.id: c for c in tree.children[0].children}
        assert set(under3) == {4, 6} and not under3[6].repeat
        assert tree.children[1].repeat and tree.children[1].children == []
        keep = run.ancestors(6)
        assert keep == {1, 2, 3, 6} and run.roots(keep) == [1]


def test_question_effectiveness_counts_children_and_unanswered_calls(runs_dir):
    with Lineage.open("demo") as run:
        stats = question_stats(run).set_index("question_id")
        layer = stats.loc["q-layer"]
        assert (layer.asked, layer.correct, layer.improved) == (3, 2, 2)  # #3, #6 correct and better; #8 pending
        gains = [run.individuals[3].fitness / run.individuals[2].fitness,
                 run.individuals[6].fitness / run.individuals[3].fitness]  # #6: over its best parent
        assert math.isclose(layer.mean_gain, sum(gains) / 2 - 1)
        assert layer.text == QUESTION_TEXT
        assert (stats.loc["q-limit"].asked, stats.loc["q-limit"].correct) == (1, 0)
        assert stats.loc["q-verify"].asked == 1  # an LLM call that produced no child
        assert list(stats.index)[0] == "q-layer"


def test_failures_best_over_evaluations_and_cost(runs_dir):
    with Lineage.open("demo") as run:
        reasons = failures(run).set_index("reason")
        assert reasons.loc["candidate does not compile"].ids == [7]
        assert reasons.loc["max error N against the reference exceeds N"].ids == [4]
        progress = best_over_evaluations(run)
        assert list(progress.id) == [1, 2, 3, 4, 5, 6, 7]  # the pending #8 is not an evaluation
        assert progress.best.is_monotonic_increasing and progress.best_id.iloc[-1] == 6
        assert pd.isna(progress.fitness.iloc[3])
        cost = llm_cost(run)
        assert cost.calls.sum() == 3 and cost.errors.sum() == 2
        assert math.isclose(cost.cost_usd.sum(), 0.0145)
        summary = run_summary(run)
        assert (summary.status, summary.evaluations, summary.correct, summary.best_id) == ("done", 7, 5, 6)


def test_failure_reasons_group_across_scenarios_and_numbers():
    names = {"a", "b"}
    assert rejection_kind("a: max error 0.31 exceeds 1e-3", names) == rejection_kind("b: max error 2 exceeds 0.5", names)
    assert rejection_kind("static guard: #include <cublas_v2.h> is not allowed ('x' at line 3)", names) == \
        rejection_kind("static guard: #include <cublas_v2.h> is not allowed ('y' at line 9)", names)
    assert rejection_kind("candidate does not compile: k.c:3: error: x", names) == "candidate does not compile"
    assert rejection_kind("", names) == rejection_kind(None) == "(no reason recorded)"


def test_resolve_run_by_path_id_and_latest(runs_dir):
    assert resolve_run("demo", runs_dir) == runs_dir / "demo"
    assert resolve_run(str(runs_dir / "demo")) == runs_dir / "demo"
    make_run(runs_dir / "newer")
    os.utime(runs_dir / "newer" / "lineage.db", (2e9, 2e9))
    assert resolve_run("latest", runs_dir) == runs_dir / "newer"
    with pytest.raises(BadInput, match="no run 'nope'"):
        resolve_run("nope", runs_dir)
    with Lineage.open("demo") as run, pytest.raises(BadInput, match="no kernel 42"):
        run.get(42)


# -- live and copied runs -----------------------------------------------------------------------------------

def test_reads_a_run_while_it_is_being_written(tmp_path):
    writer = make_run(tmp_path / "live", close=False)
    with Lineage(tmp_path / "live") as run:
        assert len(run.individuals) == 8
    with writer.transaction():  # the writer holds the write lock while a reader opens the run
        new_id = add(writer, "knob-mutation", [6], "later", "72", None)
        with Lineage(tmp_path / "live") as run:
            assert new_id not in run.individuals and run.best().id == 6
    writer.record_result(new_id, report([3.0, 3.0, 3.0]))
    with Lineage(tmp_path / "live") as run:
        assert run.best().id == new_id
    writer.close()


def test_copied_runs_open_with_or_without_wal_files(tmp_path):
    writer = make_run(tmp_path / "live", close=False)
    shutil.copytree(tmp_path / "live", tmp_path / "with_wal")
    shutil.copytree(tmp_path / "live", tmp_path / "no_wal", ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    writer.close()  # checkpoints: the database file alone now holds everything
    shutil.copytree(tmp_path / "live", tmp_path / "closed")
    assert not (tmp_path / "closed" / "lineage.db-wal").exists()
    for name in ("with_wal", "closed"):
        with Lineage(tmp_path / name) as run:
            assert run.best().id == 6 and "int block = 80;" in run.source(6)
    with pytest.raises(BadInput, match="copied without its lineage.db-wal"):
        Lineage(tmp_path / "no_wal")
    result = cli("runs", str(tmp_path / "no_wal"))
    assert result.exit_code == 0 and "unreadable" in result.output


READ_ONLY_SCRIPT = """
import sys
from pathlib import Path
from evokernel.lineage import Lineage
with Lineage(Path(sys.argv[1])) as run:
    print("best", run.best().id, len(run.individuals), run.source(6).count("int block = 80;"))
"""


def test_opens_a_run_on_a_read_only_location(tmp_path):
    """SQLite cannot create lineage.db-shm there: the run is read from a private copy."""
    make_run(tmp_path / "closed")
    if os.geteuid() != 0:
        os.chmod(tmp_path / "closed", 0o555)
        try:
            out = subprocess.run([sys.executable, "-c", READ_ONLY_SCRIPT, str(tmp_path / "closed")],
                                 capture_output=True, text=True)
        finally:
            os.chmod(tmp_path / "closed", 0o755)
    else:  # root ignores permissions: mount the run read-only in a private mount namespace
        if shutil.which("unshare") is None:
            pytest.skip("running as root without `unshare`: cannot make a read-only location")
        (tmp_path / "ro").mkdir()
        script = (f'mount --bind "{tmp_path / "closed"}" "{tmp_path / "ro"}" && '
                  f'mount -o remount,ro,bind "{tmp_path / "ro"}" && '
                  f'! touch "{tmp_path / "ro" / "probe"}" 2>/dev/null && '
                  f'"{sys.executable}" -c \'{READ_ONLY_SCRIPT}\' "{tmp_path / "ro"}"')
        out = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True)
        if out.returncode != 0 and "Operation not permitted" in out.stderr:
            pytest.skip(f"cannot mount read-only here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["best", "6", "8", "1"]


# -- the commands ---------------------------------------------------------------------------------------------

def test_runs_lists_status_evaluations_best_and_cost(runs_dir):
    result = cli("runs")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "demo" in line)
    for text in ("done", "attention-fwd-cpu", "7 (5 ok)", "1.802 (#6)", "0.0145"):
        assert text in row
    assert [s.id for s in find_runs(runs_dir)] == ["demo"]


def test_runs_on_an_empty_and_a_missing_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("runs", str(tmp_path / "empty"))
    assert result.exit_code == 0 and "no runs under" in result.output
    result = cli("runs", str(tmp_path / "missing"))
    assert result.exit_code == 2 and result.output.strip() == f"error: no runs directory {tmp_path / 'missing'}/"


def test_lineage_of_the_best_prints_one_line_per_step(runs_dir):
    result = cli("lineage", "demo")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "kernel #6" in lines[0] and "3 steps from seed #1" in lines[0]
    steps = [line for line in lines if line.startswith("  #")]
    assert [line.split()[0] for line in steps] == ["#1", "#2", "#3", "#6"]
    assert "q-layer" in steps[2] and QUESTION_TEXT in steps[2] and "openai/test-model" in steps[2]
    assert "1.196 -> 1.598 (+33.6%)" in steps[2] and "1 within noise" in steps[2]
    assert f"wins 2: {SCENARIOS[0]}, {SCENARIOS[1]}" in steps[1] and f"losses 1: {SCENARIOS[2]}" in steps[1]
    assert "(+ #2)" in steps[3]
    assert cli("lineage", "demo", "--best").output == result.output


def test_lineage_of_a_rejected_kernel_and_of_the_top_k(runs_dir):
    result = cli("lineage", "demo", "--id", "4")
    assert result.exit_code == 0
    assert "rejected" in result.output and "max error 2 against the reference" in result.output
    assert cli("lineage", "demo", "4").output == result.output  # the id after the run, as `show RUN ID` takes it
    assert cli("lineage", "demo", "3", "--tree").output == cli("lineage", "demo", "--id", "3", "--tree").output
    result = cli("lineage", "demo", "--top", "2")
    headers = [line for line in result.output.splitlines() if line.startswith("run demo")]
    assert len(headers) == 2 and "kernel #6" in headers[0] and "kernel #3" in headers[1]


def test_lineage_tree(runs_dir):
    result = cli("lineage", "demo", "--id", "3", "--tree")
    assert result.exit_code == 0
    out = result.output
    assert "#3 question-mutation q-layer 1.598" in out and "#5 repair 1.495" in out and "#8" in out
    assert "#2" not in out and out.index("#4") < out.index("#5")
    result = cli("lineage", "demo", "--tree", "--best")  # only the paths from the seed to the best kernel
    assert "#1 seed" in result.output and "(shown above)" in result.output and "#4" not in result.output
    assert result.output.count("★") == 2  # #6 under #3 and again under its second parent #2


def test_lineage_tree_without_id_is_the_whole_descendant_tree(runs_dir):
    out = cli("lineage", "demo", "--tree").output
    lines = out.splitlines()
    assert lines[0] == "run demo" and "#1 seed" in lines[1]
    for kernel in range(1, 9):  # every kernel of the run, rejected and pending ones too
        assert f"#{kernel} " in out, kernel
    assert out.count("★") == 2 and "(shown above)" in out
    # the compiler message is not cut
    assert "#7 knob-mutation rejected: candidate does not compile: x.c:5: error: expected ';'" in out
    # the run has ended: its queued kernel is not said to be pending
    assert "#8 question-mutation q-layer not evaluated (the run stopped first; --resume evaluates it)" in out


def test_lineage_tree_gain_is_over_the_parent_it_is_shown_under(runs_dir):
    out = cli("lineage", "demo", "--tree").output
    under = [line for line in out.splitlines() if "#6 question-crossover" in line]
    assert len(under) == 2
    assert "1.802 (+12.8%)" in under[0] and "(shown above)" not in under[0]  # 1.802 / 1.598 (#3)
    assert "1.802 (+50.7%)" in under[1] and "(shown above)" in under[1]  # 1.802 / 1.196 (#2), not over #3
    result = cli("lineage", "demo", "--tree", "--json")
    assert result.exit_code == 0, result.output
    [root] = json.loads(result.output)

    def nodes(node):
        yield node
        for child in node["children"]:
            yield from nodes(child)

    sixes = {n["parent"]: n for n in nodes(root) if n["id"] == 6}
    assert set(sixes) == {2, 3}
    assert math.isclose(sixes[3]["gain"], 2.2 ** (1 / 3) * 1.4 ** (1 / 3) * 1.9 ** (1 / 3) / 1.597914 - 1, rel_tol=1e-4)
    assert math.isclose(sixes[2]["gain"], 1.802055 / 1.195819 - 1, rel_tol=1e-4)
    assert sixes[2]["shown_above"] and sixes[2]["best"] and not sixes[3]["shown_above"]


def test_lineage_bad_input_exits_2(runs_dir):
    for args, message in [(["nope"], "no run 'nope'"), (["demo", "--id", "99"], "no kernel 99"),
                          (["demo", "--id", "2", "--top", "2"], "choose one of"),
                          (["demo", "2", "--id", "3"], "two kernels given: ID 2 and --id 3")]:
        result = cli("lineage", *args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_show_prints_source_diff_scenarios_build_log_and_llm_exchange(runs_dir):
    result = cli("show", "demo", "3")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "int block = 64;" in out  # source
    assert "-    int block = 32;" in out and "+    int block = 64;" in out  # diff against #2
    assert all(name in out for name in SCENARIOS) and "win" in out and "tie" in out
    assert "gcc -O3 ok" in out  # build log
    assert f"Question: {QUESTION_TEXT}" in out and "int block = 64;\n```" in out  # prompt and answer
    assert "1200 + 300 tokens" in out and QUESTION_TEXT in out


def test_show_a_crossover_and_a_rejected_kernel(runs_dir):
    out = cli("show", "demo", "6").output
    assert "diff against parent #3" in out and "diff against parent #2" in out
    result = cli("show", "demo", "7")
    assert result.exit_code == 0
    assert "candidate does not compile" in result.output and "expected ';'" in result.output
    assert "no scenario results" in result.output
    result = cli("show", "demo", "0")
    assert result.exit_code == 2 and result.output.startswith("error: run demo has no kernel 0")


def test_diff_compares_sources_and_scenarios(runs_dir):
    result = cli("diff", "demo", "2", "6")
    assert result.exit_code == 0, result.output
    assert "-    int block = 32;" in result.output and "+    int block = 80;" in result.output
    rows = [line for line in result.output.splitlines() if SCENARIOS[2] in line]
    assert rows and "0.950" in rows[0] and "1.900" in rows[0] and "2.000" in rows[0] and "win" in rows[0]
    assert "#2 1.196 (correct) -> #6 1.802 (correct) (+50.7%)" in result.output
    assert cli("diff", "demo", "2", "77").exit_code == 2


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_three_tables(runs_dir, tmp_path, fmt):
    out = tmp_path / f"export-{fmt}"
    result = cli("export", "demo", "--format", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    individuals = read(out / f"individuals.{fmt}")
    scenarios = read(out / f"scenario_results.{fmt}")
    calls = read(out / f"llm_calls.{fmt}")
    assert list(individuals.id) == list(range(1, 9))
    assert individuals.set_index("id").loc[6, "parent_ids"] == "3,2"
    assert individuals.set_index("id").loc[4, "status"] == "rejected"
    assert math.isclose(individuals.set_index("id").loc[3, "fitness_over_parent"], 1.597914 / 1.195819, rel_tol=1e-5)
    with Store(runs_dir / "demo", readonly=True) as store:
        expected = sum(len(store.scenario_results(i)) for i in range(1, 9))
    assert len(scenarios) == expected and set(scenarios.individual_id) == {1, 2, 3, 4, 5, 6}
    assert len(calls) == 3 and calls.question_id.tolist() == ["q-layer", "q-verify", "q-verify"]


def test_export_refuses_a_file_as_output(runs_dir, tmp_path):
    (tmp_path / "file.csv").write_text("x")
    result = cli("export", "demo", "-o", str(tmp_path / "file.csv"))
    assert result.exit_code == 2 and "not a directory" in result.output
    assert cli("export", "demo", "--format", "xlsx", "-o", str(tmp_path / "x")).exit_code == 2
    result = cli("export", "demo", "-o", str(tmp_path / "file.csv" / "sub"))
    assert result.exit_code == 2 and result.output.startswith("error: cannot write ")


def retimed(speedups: list[float], spreads: list[float], correct: bool = True) -> dict:
    return {"correct": correct, "geomean_speedup": math.prod(speedups) ** (1 / len(speedups)) if correct else None,
            "failure": None if correct else "evaluation error: speed reference missing",
            "scenarios": [{"name": n, "speedup": v, "spread": e} for n, v, e in zip(SCENARIOS, speedups, spreads)]}


def test_the_re_timing_of_the_best_kernel_tells_a_gain_from_noise(runs_dir):
    from evokernel.lineage import describe_retime, retime_record

    with Lineage.open("demo") as run:
        best, seed = run.individuals[6], run.individuals[1]
    noisy = retime_record(retimed([1.05, 1.12, 1.07], [0.18, 0.61, 0.30]), best, seed, 21)  # the CPU task's spreads
    assert noisy["verdict"] == "within noise" and noisy["low"] < 1 < noisy["high"]
    assert math.isclose(noisy["search_ratio"], best.fitness / seed.fitness)
    small = retime_record(retimed([1.02, 1.03, 1.02], [0.005, 0.005, 0.005]), best, seed, 21)
    assert small["low"] > 1 and small["verdict"] == "gain"
    one_scenario = retime_record(retimed([1.25, 1.0, 1.0], [0.0, 0.1, 0.1]), best, seed, 21)
    assert one_scenario["low"] > 1 and one_scenario["geomean"] < 1.1  # not above 1 + the median spread (10%)
    assert one_scenario["verdict"] == "within noise"
    failed = retime_record(retimed([1.0] * 3, [0.0] * 3, correct=False), best, seed, 21)
    assert failed["verdict"] == "not confirmed" and "not confirmed" in describe_retime(failed)
    assert describe_retime(noisy).startswith("re-timed against seed #1 (21 rounds): ")
    assert "within noise" in describe_retime(noisy) and "a gain beyond the noise" in describe_retime(small)

    with Store(runs_dir / "demo") as store:
        store.set_meta("best_recheck", noisy)
    result = cli("lineage", "demo", "--best")
    assert result.exit_code == 0 and describe_retime(noisy) in result.output.replace("\n", "")
    assert "within noise" not in cli("lineage", "demo", "--id", "3").output.split("\n")[0]
    data = json.loads(cli("lineage", "demo", "--json").output)
    assert data[0]["retime"]["verdict"] == "within noise"
    page = runs_dir.parent / "r.html"
    assert cli("report", "demo", "-o", str(page)).exit_code == 0
    assert "within noise: the gain over the seed does not stand" in page.read_text()


def test_a_run_whose_driver_was_killed_reads_stopped_with_how_to_resume(tmp_path):
    """The driver writes 'running' and holds the run's lock while it lives; after `kill -9` the lock is gone
    and the meta still says running."""
    from evokernel.store import RunLock

    run = tmp_path / "runs" / "killed"
    store = make_run(run, close=False)
    store.set_meta("status", "running")
    store.close()
    listed = cli("runs", str(tmp_path / "runs"))
    assert listed.exit_code == 0, listed.output
    assert "running" not in listed.output and "stopped" in listed.output
    assert f"killed: stopped, its driver is gone (killed?): resume it with evokernel run --resume {run}" in listed.output
    assert json.loads(cli("runs", str(tmp_path / "runs"), "--json").output)[0]["status"] == "stopped"
    lock = RunLock(run)  # a live driver
    try:
        assert json.loads(cli("runs", str(tmp_path / "runs"), "--json").output)[0]["status"] == "running"
    finally:
        lock.release()
