"""Evaluators without Ray: the search runs end to end with the local evaluator (checks in threads of the
driver) and with the replay evaluator (reports recorded by a run made here, served again without any
harness); a kernel never recorded is rejected as such; a place with nothing to replay is one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import load_config
from evokernel.errors import BadInput
from evokernel.evaluation.replay import NOT_RECORDED, ReplayEvaluator
from evokernel.harness import CheckOptions, get_task
from evokernel.search import Search
from evokernel.store import Store
from evokernel.source import normalized_hash

ORIGINAL = get_task("attention-fwd-cpu").original.read_text()


def make_config(tmp_path: Path, evaluations: int, **resources) -> Path:
    data = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4,
            "budget": {"evaluations": evaluations}, "random_seed": 11,
            "resources": {"evaluation_timeout_s": 60, **resources}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def rows(run_dir: Path) -> list:
    with Store(run_dir, readonly=True) as store:
        return store.individuals()


@pytest.fixture
def no_ray(monkeypatch):
    """`import ray` fails: what runs here runs without Ray."""
    monkeypatch.setitem(sys.modules, "ray", None)


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory) -> Path:
    """A CPU run of 5 evaluations made with the local evaluator: the reports the replay tests serve."""
    tmp_path = tmp_path_factory.mktemp("recorded")
    config = load_config(make_config(tmp_path, 5, evaluator="local"))
    result = Search(config, tmp_path / "run", retime_best=False).run()
    assert result.status == "finished" and result.stats.evaluations == 5
    return tmp_path / "run"


def test_the_search_runs_end_to_end_with_the_local_evaluator(tmp_path, no_ray):
    result = CliRunner().invoke(main, ["run", str(make_config(tmp_path, 4, evaluator="local")),
                                       "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    found = rows(run_dir)
    assert len(found) == 4 and all(row.status == "correct" for row in found)
    assert all(row.report["scenario_set"] == "quick" and row.report["scenarios"] for row in found)
    with Store(run_dir, readonly=True) as store:
        assert store.meta()["config"]["resources"]["evaluator"] == "local"


def test_a_replayed_search_gets_the_recorded_reports_without_any_harness(tmp_path, recorded_run, no_ray,
                                                                         monkeypatch):
    def no_harness(*args, **kwargs):
        raise AssertionError("the replay evaluator ran the harness")

    monkeypatch.setattr("evokernel.harness.check.check_source", no_harness)
    monkeypatch.setattr("evokernel.harness.check_source", no_harness)
    recorded = {row.normalized_hash: row.report for row in rows(recorded_run)}
    config = load_config(make_config(tmp_path, 8, evaluator="replay", replay_evaluations=str(recorded_run)))
    result = Search(config, tmp_path / "replayed").run()
    assert result.status == "finished" and result.stats.evaluations == 8
    replayed = rows(tmp_path / "replayed")
    served = [row for row in replayed if row.normalized_hash in recorded]
    assert served[0].operator == "seed" and len(served) >= 2
    for row in served:  # the recorded verdict and figures, under this run's own label
        assert {**row.report, "kernel": ""} == {**recorded[row.normalized_hash], "kernel": ""}
        assert row.report["kernel"] == f"individual {row.id}" and row.worker == "replay"
    for row in replayed:
        if row.normalized_hash not in recorded:
            assert row.status == "rejected" and row.failure == NOT_RECORDED
    with Store(tmp_path / "replayed", readonly=True) as store:
        assert "best_recheck" not in store.meta()  # recorded reports measure nothing now: no re-timing


def test_a_kernel_never_recorded_is_rejected_as_such(recorded_run):
    options = CheckOptions(scenario_set="quick")
    config = load_config(make_config(recorded_run.parent, 1, evaluator="replay", replay_evaluations=str(recorded_run)))
    replay = ReplayEvaluator.start(config.resources, "attention-fwd-cpu", options)
    replay.submit(1, ORIGINAL + "\nint evk_unrecorded;\n", "new kernel")
    replay.submit(2, "// a comment changes nothing\n" + ORIGINAL, "the seed again")
    assert replay.in_flight() == 2
    unknown, seed = sorted(replay.wait(0), key=lambda finished: finished.key)
    assert not unknown.report["correct"] and unknown.report["failure"] == NOT_RECORDED
    assert unknown.report["kernel"] == "new kernel" and seed.report["correct"]
    assert replay.in_flight() == 0 and replay.busy_fraction() is not None


def test_check_reports_beside_their_kernels_are_replayed(tmp_path, recorded_run):
    seed = next(row for row in rows(recorded_run) if row.operator == "seed")
    (tmp_path / "k1.c").write_text(ORIGINAL)
    (tmp_path / "k1.json").write_text(json.dumps(seed.report))
    config = load_config(make_config(tmp_path, 1, evaluator="replay", replay_evaluations="."))
    replay = ReplayEvaluator.start(config.resources, "attention-fwd-cpu", CheckOptions(scenario_set="quick"))
    assert set(replay.reports) == {normalized_hash(ORIGINAL)}
    (tmp_path / "k2.json").write_text("{}")
    with pytest.raises(BadInput, match="k2.json is not a report of `evokernel check --json`"):
        ReplayEvaluator.start(config.resources, "attention-fwd-cpu", CheckOptions(scenario_set="quick"))


def test_nothing_to_replay_is_one_line_before_anything_is_evaluated(tmp_path, recorded_run):
    (tmp_path / "empty").mkdir()
    for place, holds in ((tmp_path / "empty", "nothing"), (recorded_run, "task attention-fwd-cpu, scenarios 'quick'")):
        path = make_config(tmp_path, 2, evaluator="replay", replay_evaluations=str(place))
        data = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**data, "scenarios": "grid"}))
        result = CliRunner().invoke(main, ["run", str(path), "--runs-dir", str(tmp_path / "runs")])
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error")]
        assert len(errors) == 1 and "holds no report of task attention-fwd-cpu, scenarios 'grid'" in errors[0]
        assert f"(it holds: {holds}" in errors[0] and "Traceback" not in result.output
