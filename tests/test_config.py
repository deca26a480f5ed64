"""Run configs: the embedded defaults and the experiment config validate; invalid configs exit 2
through the CLI with one line that names the field."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import load_config, parse_config
from evokernel.defaults import default_config_path

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("path", [default_config_path(False), default_config_path(True),
                                  ROOT / "experiments" / "attention_cpu" / "config.yaml"])
def test_shipped_configs_validate_and_round_trip(path):
    config = load_config(path)
    again = parse_config(config.model_dump(mode="json", by_alias=True), "round trip")
    assert again == config


def test_default_config_without_gpu_is_the_cpu_task():
    assert load_config(default_config_path(False)).task == "attention-fwd-cpu"
    assert load_config(default_config_path(True)).task == "attention-fwd"


@pytest.mark.parametrize("content, field", [
    ({"task": "attention-fwd-cpu", "population_size": 1}, "population_size"),
    ({"task": "attention-fwd-cpu", "budget": {"evaluations": 0}}, "budget.evaluations"),
    ({"task": "attention-fwd-cpu", "operators": {"knob-mutation": -1}}, "operators.knob-mutation"),
    ({"task": "attention-fwd-cpu", "selection": {"tournament_sise": 3}}, "selection.tournament_sise"),
    ({"task": "no-such-task"}, "task"),
    ({"task": "attention-fwd-cpu", "scenarios": "nope"}, "scenarios"),
    ({"task": "attention-fwd-cpu", "seeds": ["missing.c"]}, "seeds.0"),
    ({"population_size": 4}, "task"),
])
def test_invalid_config_exits_2_naming_the_field(tmp_path, content, field):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(content))
    result = CliRunner().invoke(main, ["run", str(path), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"'{field}" in lines[0], result.output
    assert not (tmp_path / "runs").exists()  # nothing started


@pytest.mark.parametrize("args, message", [
    (["run", "{tmp}/missing.yaml"], "config file not found"),
    (["run", "--resume", "{tmp}/no-run"], "not a run directory"),
    (["run", "{tmp}/bad.yaml"], "not valid YAML"),
    (["run", "--api-base", "http://127.0.0.1:1", "{tmp}/ok.yaml"], "--api-base needs a model"),
    (["run", "{tmp}/ok.yaml", "--resume", "{tmp}"], "either CONFIG or --resume"),
])
def test_bad_run_options_exit_2(tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("task: [unclosed\n")
    (tmp_path / "ok.yaml").write_text("task: attention-fwd-cpu\n")
    result = CliRunner().invoke(main, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
