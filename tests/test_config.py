"""Run configs: the embedded defaults and the experiment config validate; invalid configs exit 2
through the CLI with one line that names the field."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import load_config, parse_config
from evokernel.errors import BadInput
from evokernel.defaults import default_config_path
from test_lineage_fixture import make_run

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
    ({"task": "attention-fwd-cpu", "resources": {"evaluation_timeout_s": 1e18}}, "resources.evaluation_timeout_s"),
    ({"task": "attention-fwd-cpu", "resources": {"cpus_per_evaluation": 5000}}, "resources.cpus_per_evaluation"),
    ({"task": "attention-fwd-cpu", "resources": {"max_parallel": 1000000}}, "resources.max_parallel"),
    ({"task": "attention-fwd-cpu", "trials": 1000000000}, "trials"),
    ({"task": "attention-fwd-cpu", "random_seed": -1}, "random_seed"),
    ({"task": "attention-fwd-cpu", "random_seed": 2**64}, "random_seed"),
    ({"task": "attention-fwd-cpu", "operators": {"knob-mutaton": 1}}, "operators': unknown operator 'knob-mutaton' "
                                                                       "(known: first-kernel, knob-crossover, knob-mutation,"),
    ({"task": "attention-fwd-cpu", "resources": {"evaluator": "replay"}}, "resources': evaluator 'replay' needs"),
    ({"task": "attention-fwd-cpu", "resources": {"evaluator": "ray", "replay_evaluations": "."}}, "resources'"),
    ({"task": "attention-fwd-cpu", "resources": {"evaluator": "threads"}}, "resources.evaluator"),
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


def test_a_number_of_thousands_of_digits_is_a_field_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("task: attention-fwd-cpu\nrandom_seed: " + "9" * 5000 + "\n")
    result = CliRunner().invoke(main, ["run", str(path), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "field 'random_seed'" in lines[0] and len(lines[0]) < 300, result.output


def test_files_that_are_not_utf8_are_one_line_errors_naming_the_file(tmp_path):
    from evokernel.harness import get_task

    original = get_task("attention-fwd-cpu").original.read_bytes()
    seed = tmp_path / "seed.c"
    seed.write_bytes(original.replace(b"// ", b"// \xe9 ", 1))
    kernel = tmp_path / "kernel.c"
    kernel.write_bytes(seed.read_bytes())
    config = tmp_path / "latin1.yaml"
    config.write_bytes(b"task: attention-fwd-cpu\nname: caf\xe9\n")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"task": "attention-fwd-cpu", "seeds": [str(seed)]}))
    reference = tmp_path / "reference.yaml"
    reference.write_text(yaml.safe_dump({"task": "attention-fwd-cpu", "speed_reference": str(kernel)}))
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "q.yaml").write_bytes(b"questions:\n  - id: q\n    text: \"Is the \xff load coalesced?\"\n")
    reviewed = tmp_path / "reviewed"
    reviewed.mkdir()
    (reviewed / "rejected-proposals.txt").write_bytes(b"q-layer\nq-\xe9\n")
    make_run(tmp_path / "run")
    cases = [(["run", str(config)], config), (["run", str(good)], seed), (["run", str(reference)], kernel),
             (["check", str(kernel), "--task", "attention-fwd-cpu"], kernel),
             (["check", str(get_task("attention-fwd-cpu").original), "--task", "attention-fwd-cpu",
               "--original", str(kernel)], kernel),
             (["bank", "list", "--bank", str(bank)], bank / "q.yaml"),
             (["bank", "review", str(tmp_path / "run"), "--bank", str(reviewed)], reviewed / "rejected-proposals.txt")]
    for args, named in cases:
        result = CliRunner().invoke(main, [*args, "--runs-dir", str(tmp_path / "runs")] if args[0] == "run" else args)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.strip().splitlines() if not line.startswith("warning")]
        assert len(lines) == 1 and str(named) in lines[0] and "not UTF-8" in lines[0], (args, result.output)
    assert not (tmp_path / "runs").exists()


def test_a_misspelt_speed_reference_is_one_line_naming_the_field(tmp_path):
    (tmp_path / "config.yaml").write_text("task: attention-fwd\nscenarios: quick\nspeed_reference: cudnnn\n")
    with pytest.raises(BadInput, match=r"config.yaml: field 'speed_reference': 'cudnnn' is neither a baseline of task "
                                       r"attention-fwd \(original, cudnn, flash\) nor a kernel file"):
        load_config(tmp_path / "config.yaml")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "ref.cu").write_text("// a reference kernel\n")
    (tmp_path / "config.yaml").write_text("task: attention-fwd\nspeed_reference: kernels/ref.cu\n")
    assert load_config(tmp_path / "config.yaml").speed_reference == str((kernels / "ref.cu").resolve())
    (tmp_path / "config.yaml").write_text("task: attention-fwd\nspeed_reference: cudnn\n")
    assert load_config(tmp_path / "config.yaml").speed_reference == "cudnn"


def test_a_run_keeps_absolute_seed_paths_and_resumes_without_its_seeds(tmp_path, monkeypatch):
    """A config's relative seeds are kept absolute in the run's copy (resolved from the run directory they would
    name another file), and a resumed run does not look for them (it may have moved to another machine)."""
    project = tmp_path / "project"
    (project / "kernels").mkdir(parents=True)
    (project / "kernels" / "seed.c").write_text("// seed\n")
    (project / "config.yaml").write_text("task: attention-fwd-cpu\nseeds: [kernels/seed.c]\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(Path("project/config.yaml"))
    assert config.seeds == [(project / "kernels" / "seed.c").resolve()]
    run_copy = tmp_path / "run" / "config.yaml"
    run_copy.parent.mkdir()
    run_copy.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    (project / "kernels" / "seed.c").unlink()
    with pytest.raises(BadInput, match="field 'seeds.0': file not found"):
        load_config(run_copy)
    assert load_config(run_copy, resumed=True).seeds == config.seeds


def test_a_setting_that_moved_to_an_operator_says_where_it_lives_now_and_old_runs_resume():
    with pytest.raises(BadInput, match=r"^c.yaml: field 'triggers.max_repairs' is now the repair operator's option: "
                                       r"operators: \{repair: \{max_attempts: 4\}\}$"):
        parse_config({"task": "attention-fwd-cpu", "triggers": {"max_repairs": 4}}, "c.yaml")
    resumed = parse_config({"task": "attention-fwd-cpu", "triggers": {"max_repairs": 4, "suspicious_gain": 2},
                            "operators": {"repair": 0.25}}, "RUN/config.yaml", resumed=True)
    assert resumed.operators.options("repair") == {"max_attempts": 4} and resumed.operators.as_dict()["repair"] == 0.25
    assert resumed.triggers.suspicious_gain == 2
