"""Proposals that make no kernel are visible: each is kept in the run's database with its reason in full and
its kind, counted by operator and kind in the summary, `runs`, `lineage`, `show` and the report (also after a
resume and for a run recorded before they were kept), the first of each kind is said once in full, and a run
that stops for lack of new kernels says which reason dominated. Runs use the local evaluator (no Ray)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import load_config
from evokernel.lineage import Lineage
from evokernel.lineage.statistics import UNRECORDED, proposal_failure_counts
from evokernel.mutations import ProposalFailed
from evokernel.report import render_report
from evokernel.search import Search, proposal_failure_kind
from evokernel.search.proposing import UNPRODUCTIVE_LIMIT
from evokernel.store import ProposalFailure, Store
from test_lineage_fixture import make_run

UNKNOWN_TASK = "unknown task 'task-{n}' (known: attention-fwd, attention-fwd-cpu)"
NO_KERNEL = "broken (q-{n}): answer {n} holds no kernel"


class Broken:
    """An operator that never makes a kernel: three times of four an unknown task, else an answer without one."""

    name, arity, uses_llm = "broken", 1, False

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, parents, context):
        self.calls += 1
        if self.calls % 4:
            raise ProposalFailed(UNKNOWN_TASK.format(n=self.calls))
        raise ProposalFailed(NO_KERNEL.format(n=self.calls), llm_call_id=self.calls)


def config(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4, "random_seed": 7,
        "budget": {"evaluations": 20},
        "resources": {"evaluator": "local", "max_parallel": 1, "evaluation_timeout_s": 30}}))
    return load_config(path)


def search(tmp_path: Path, run_dir: Path, resume: bool = False) -> tuple:
    notes: list[str] = []
    result = Search(config(tmp_path), run_dir, resume=resume, operator_set={"broken": (Broken(), 1.0)},
                    notify=notes.append, retime_best=False).run()
    return result, notes


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory) -> tuple:
    """A run whose only operator always fails: (run directory, result, what the driver said)."""
    tmp_path = tmp_path_factory.mktemp("broken")
    run_dir = tmp_path / "runs" / "broken"
    result, notes = search(tmp_path, run_dir)
    return run_dir, result, notes


@pytest.mark.parametrize("operator, reason, kind", [
    ("question-mutation", "question-mutation (tiling-l2): answer holds no kernel (3 fences)", "answer holds no kernel"),
    ("question-mutation", "question-mutation (other-q-7): answer holds no kernel", "answer holds no kernel"),
    ("question-mutation", UNKNOWN_TASK.format(n=1), "unknown task"),
    ("repair", "unknown task 'y' (known: z)", "unknown task"),
    ("question-mutation", "question-mutation (q): edit 2: SEARCH text not found in the parent (starts 'for (int i;')",
     "edit N: SEARCH text not found in the parent"),
    ("question-mutation", "question-mutation (q): no code block and no SEARCH/REPLACE edits in the answer "
     "(one that changes nothing says `Change: none` and why)",
     "no code block and no SEARCH/REPLACE edits in the answer"),
    ("repair", "repair: 3 repairs already spent on kernel #12's line (operators.repair.max_attempts = 3)",
     "N repairs already spent on kernel #N's line"),
    ("question-mutation", "LLM call failed on every model (rate limited: RateLimitError: slow down)",
     "LLM call failed on every model"),
    ("question-mutation", "not in the replayed run: runs/20261130T120000Z holds no further answer to this question",
     "not in the replayed run: holds no further answer to this question"),
    ("knob-crossover", "parents 3 and 5 have the same knob values", "parents N and N have the same knob values"),
    ("question-mutation", "KeyError: 'parents'\nTraceback ...", "KeyError"),
    ("repair", "", "unknown"),
])
def test_kinds_drop_the_details_so_that_counts_group(operator, reason, kind):
    assert proposal_failure_kind(operator, reason) == kind


def test_every_failed_proposal_is_in_the_database_with_its_kind_and_reason(broken_run):
    run_dir, result, _ = broken_run
    with Store(run_dir, readonly=True) as store:
        failed = store.proposal_failures()
    assert len(failed) == UNPRODUCTIVE_LIMIT and result.stats.evaluations == 1  # the seed; then nothing new
    assert all(f.operator == "broken" and f.parent_ids == [1] for f in failed)
    assert [f.reason for f in failed[:4]] == [UNKNOWN_TASK.format(n=1), UNKNOWN_TASK.format(n=2),
                                             UNKNOWN_TASK.format(n=3), NO_KERNEL.format(n=4)]
    assert [f.kind for f in failed[:4]] == ["unknown task"] * 3 + ["answer N holds no kernel"]
    assert [f.llm_call_id for f in failed[:4]] == [None, None, None, 4]


def test_the_first_failure_of_each_kind_is_said_once_in_full(broken_run):
    _, _, notes = broken_run
    said = [line for line in notes if "made no kernel" in line]
    assert len(said) == 2, said
    assert UNKNOWN_TASK.format(n=1) in said[0] and "'unknown task'" in said[0]
    assert NO_KERNEL.format(n=4) in said[1] and "LLM call 4" in said[1]


def test_the_stop_reason_names_the_dominant_reason(broken_run):
    _, result, _ = broken_run
    assert result.reason == (f"no new kernels: the last {UNPRODUCTIVE_LIMIT} proposals were duplicates or failed "
                             f"(most often: broken: unknown task, 150 of {UNPRODUCTIVE_LIMIT})")


def test_summary_runs_lineage_show_and_report_count_by_operator_and_reason(broken_run, capsys):
    from evokernel.cli.run import _print_outcome

    run_dir, result, _ = broken_run
    capsys.readouterr()
    _print_outcome(result, run_dir, "original")
    out = capsys.readouterr().out
    assert "200 failed proposals" in out
    assert "broken: unknown task ×150; broken: answer N holds no kernel ×50" in out

    listed = json.loads(CliRunner().invoke(main, ["runs", str(run_dir.parent), "--json"]).output)
    assert listed[0]["proposal_failures"] == [{"operator": "broken", "kind": "unknown task", "count": 150},
                                              {"operator": "broken", "kind": "answer N holds no kernel", "count": 50}]
    table = CliRunner().invoke(main, ["runs", str(run_dir.parent)]).output
    assert table.splitlines()[1].endswith("\tbroken: unknown task ×150; broken: answer N holds no kernel ×50")

    traced = CliRunner().invoke(main, ["lineage", str(run_dir)]).output
    assert "failed proposals in run broken (operator: reason ×count): broken: unknown task ×150" in traced
    shown = CliRunner().invoke(main, ["show", str(run_dir), "1"]).output
    assert "failed proposals from #1 (operator: reason ×count): broken: unknown task ×150" in shown
    shown = json.loads(CliRunner().invoke(main, ["show", str(run_dir), "1", "--json"]).output)
    assert len(shown["failed_proposals"]) == 200 and shown["failed_proposals"][3]["reason"] == NO_KERNEL.format(n=4)

    with Lineage(run_dir) as run:
        page = render_report(run)
    section = page[page.index('id="proposal-failures"'):page.index('id="cost"')]
    assert "<td>150</td>" in section and "<td>50</td>" in section and "answer N holds no kernel" in section
    assert "unknown task &#x27;task-1&#x27; (known: attention-fwd, attention-fwd-cpu)" in section  # the first, in full
    assert "<span>failed proposals: 200</span>" in page


def test_counts_are_right_after_a_resume(tmp_path, broken_run):
    import shutil

    run_dir = tmp_path / "resumed"
    shutil.copytree(broken_run[0], run_dir)
    result, notes = search(tmp_path, run_dir, resume=True)
    assert sum(result.stats.proposal_failures.values()) == 2 * UNPRODUCTIVE_LIMIT
    assert not [line for line in notes if "made no kernel" in line]  # each kind was said in the first session
    with Store(run_dir, readonly=True) as store:
        assert len(store.proposal_failures()) == 2 * UNPRODUCTIVE_LIMIT
        assert store.meta()["counters"]["proposal_failures"] == {"broken": 2 * UNPRODUCTIVE_LIMIT}
        assert proposal_failure_counts(store) == {("broken", "unknown task"): 300,
                                                  ("broken", "answer N holds no kernel"): 100}


def test_a_run_recorded_before_failures_were_kept_shows_its_meta_counters(tmp_path):
    store = make_run(tmp_path / "runs" / "old", close=False)
    store.set_meta("counters", {"duplicates": 0, "proposal_failures": {"question-mutation": 7}})
    store.close()
    with sqlite3.connect(tmp_path / "runs" / "old" / "lineage.db") as db:
        db.execute("DROP TABLE proposal_failures")
        db.execute("DROP TABLE prompts")
        db.execute("PRAGMA user_version = 2")
    listed = json.loads(CliRunner().invoke(main, ["runs", str(tmp_path / "runs"), "--json"]).output)
    assert listed[0]["proposal_failures"] == [{"operator": "question-mutation", "kind": UNRECORDED, "count": 7}]
    with Lineage(tmp_path / "runs" / "old") as run:
        section = render_report(run)
    assert "not recorded (a run recorded before they were kept)" in section

    with Store(tmp_path / "runs" / "old") as store:  # a writer (a resume) adds the table; later failures have reasons
        store.add_proposal_failure(ProposalFailure(operator="question-mutation", kind="empty answer",
                                                   reason="question-mutation (q): empty answer"))
        assert proposal_failure_counts(store) == {("question-mutation", UNRECORDED): 6,
                                                  ("question-mutation", "empty answer"): 1}
