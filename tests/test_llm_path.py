"""The first hour with an LLM, as a new user meets it: `evokernel run` against a local OpenAI-compatible
server without a key; a wrong endpoint refused at start in one line (or, with --no-llm-check, failed
calls counted by reason); the question operators stopped after failures in a row while the knob
operators go on; a USD budget refused for a model without a price; costs recorded from config prices
and litellm's local map; a replay answered from a recorded run with no server at all.
All LLM traffic goes to tests/fake_llm_server.py on 127.0.0.1."""

from __future__ import annotations

import itertools
import random
import socket
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import LLMConfig
from evokernel.harness import get_task
from evokernel.mutations.llm import LLMClient
from evokernel.store import Store
from fake_llm_server import FakeLLMServer

ORIGINAL = get_task("attention-fwd-cpu").original.read_text()
QUESTION_ID = "tile-shape"
NO_KNOBS = {"knob-mutation": 0, "knob-crossover": 0, "question-mutation": 1, "question-crossover": 0, "repair": 0}
KNOBS_TOO = {"knob-mutation": 1, "knob-crossover": 0, "question-mutation": 20, "question-crossover": 0, "repair": 0}


pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.fixture(autouse=True)
def no_key(monkeypatch):
    """A new user's environment: no provider key at all."""
    for name in ("OPENAI_API_KEY", "EVK_FAKE_KEY"):
        monkeypatch.delenv(name, raising=False)


def answers() -> list[str]:
    """Answers that each give a different valid child of the CPU task's original kernel."""
    out = []
    for q, k in itertools.product([1, 2, 8, 16], [4, 16, 32]):
        child = ORIGINAL.replace("#define BLOCK_Q 4 ", f"#define BLOCK_Q {q} ").replace(
            "#define BLOCK_K 8 ", f"#define BLOCK_K {k} ")
        out.append(f"Hypothesis: the tile shape.\n```c\n{child}```\n")
    return out


def dead_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(tmp_path: Path, operators: dict, llm: dict | None = None, **settings) -> Path:
    bank = tmp_path / "bank"
    bank.mkdir(exist_ok=True)
    (bank / "q.yaml").write_text(yaml.safe_dump({"questions": [{
        "id": QUESTION_ID, "text": "Which tile shape keeps the query block and the key block in the L1 cache?",
        "triggers": ["default", "stagnation", "declared-limit", "suspicious-gain", "repair", "crossover"],
        "layers": ["memory"]}]}))
    data = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4, "random_seed": 3,
            "operators": operators, "bank": {"builtin": False, "dirs": [str(bank)]},
            "triggers": {"propose_questions": False},
            "llm": {"max_retries": 0, "max_concurrent": 1, **(llm or {})},
            "budget": {"evaluations": 4},
            "resources": {"gpus_per_evaluation": 0, "max_parallel": 1, "evaluation_timeout_s": 60}, **settings}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def evokernel(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def only_run(runs: Path) -> Path:
    (run_dir,) = runs.iterdir()
    return run_dir


def test_a_local_server_needs_no_key(tmp_path):
    with FakeLLMServer(answers()) as server:
        config = write_config(tmp_path, NO_KNOBS)
        result = evokernel("run", config, "--model", "openai/fake", "--api-base", server.api_base,
                           "--runs-dir", tmp_path / "runs")
        requests = len(server.requests)
    assert result.exit_code == 0, result.output
    assert "checking 1 model(s)" in result.output
    with Store(only_run(tmp_path / "runs"), readonly=True) as store:
        calls = store.llm_calls()
        children = [row for row in store.individuals() if row.operator == "question-mutation"]
    assert requests == 1 + len(calls)  # the check, then one request per recorded call
    assert calls and all(call["error"] is None for call in calls) and children
    assert "LLM calls: " in result.output and ", 0 failed" in result.output


def test_a_dead_endpoint_is_refused_at_start_in_one_line(tmp_path):
    config = write_config(tmp_path, NO_KNOBS)
    api_base = f"http://127.0.0.1:{dead_port()}/v1"
    result = evokernel("run", config, "--model", "openai/fake", "--api-base", api_base, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: LLM check of model openai/fake at " + api_base)
    assert "connection failed" in lines[0] and "--no-llm-check" in lines[0]
    assert not (tmp_path / "runs").exists()  # refused before a run directory was made


def test_without_the_check_a_dead_endpoint_stops_the_questions_and_the_summary_counts_why(tmp_path):
    config = write_config(tmp_path, KNOBS_TOO, llm={"max_consecutive_failures": 3}, budget={"evaluations": 6})
    api_base = f"http://127.0.0.1:{dead_port()}/v1"
    result = evokernel("run", config, "--model", "openai/fake", "--api-base", api_base, "--no-llm-check",
                       "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    stop = ("question operators stopped: the last 3 LLM calls failed on every model (openai/fake: connection "
            "failed); the run goes on with the knob operators")
    assert result.output.count("question operators stopped") == 1 and stop in result.output
    assert "LLM calls: 3, 3 failed: connection failed 3" in result.output
    run_dir = only_run(tmp_path / "runs")
    with Store(run_dir, readonly=True) as store:
        rows = store.individuals()
        assert store.llm_failures() == {"connection failed": 3}
    assert sum(row.status in ("correct", "rejected") for row in rows) == 6  # the knob operators went on
    assert not any(row.operator == "question-mutation" for row in rows)
    report = evokernel("report", run_dir, "-o", tmp_path / "report.html")
    assert report.exit_code == 0, report.output
    page = (tmp_path / "report.html").read_text()
    assert "Failed LLM calls by reason: connection failed <b>3</b>" in page and "question operators stopped" in page


def test_failures_in_a_row_stop_the_question_operators_in_one_line(tmp_path):
    with FakeLLMServer(["OK", {"status": 500}, {"status": 503}, {"status": 500}, "never asked"]) as server:
        config = write_config(tmp_path, KNOBS_TOO, llm={"max_consecutive_failures": 3}, budget={"evaluations": 6})
        result = evokernel("run", config, "--model", "openai/fake", "--api-base", server.api_base,
                           "--runs-dir", tmp_path / "runs")
        requests = len(server.requests)
    assert result.exit_code == 0, result.output
    assert requests == 4  # the check and three failed calls; none after the stop
    lines = [line for line in result.output.splitlines() if "question operators stopped" in line]
    assert len(lines) == 1 and "the last 3 LLM calls failed on every model" in lines[0]
    assert "knob operators" in lines[0]
    assert "LLM calls: 3, 3 failed: server error 2, service unavailable 1" in result.output


def test_a_budget_with_an_unpriced_model_is_refused_at_start(tmp_path):
    config = write_config(tmp_path, NO_KNOBS, budget={"evaluations": 4, "usd": 1.0})
    result = evokernel("run", config, "--model", "openai/no-such-price", "--api-base", "http://127.0.0.1:9/v1",
                       "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "budget.usd" in lines[0] and "openai/no-such-price has no price" in lines[0]
    assert "usd_per_mtok_in" in lines[0] and not (tmp_path / "runs").exists()


def test_a_priced_model_has_its_cost_recorded_and_a_budget_accepted(tmp_path):
    with FakeLLMServer(answers()) as server:
        model = {"model": "openai/fake", "api_base": server.api_base, "usd_per_mtok_in": 2.0, "usd_per_mtok_out": 10.0}
        config = write_config(tmp_path, NO_KNOBS, llm={"models": [model]}, budget={"evaluations": 3, "usd": 5.0})
        result = evokernel("run", config, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    with Store(only_run(tmp_path / "runs"), readonly=True) as store:
        calls = store.llm_calls()
    assert calls
    for call in calls:
        assert call["cost_usd"] == pytest.approx((2.0 * call["prompt_tokens"] + 10.0 * call["completion_tokens"]) / 1e6)
        assert call["cost_usd"] > 0


def test_a_model_in_litellms_local_map_is_priced_from_it(tmp_path):
    with Store(tmp_path / "run", create=True) as store, FakeLLMServer(["an answer"]) as server:
        config = LLMConfig(models=[{"model": "openai/gpt-4o-mini", "api_base": server.api_base}], max_retries=0)
        LLMClient(config, store).ask("prompt", random.Random(0))
        [call] = store.llm_calls()
    import litellm

    prompt_usd, completion_usd = litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=call["prompt_tokens"],
                                                        completion_tokens=call["completion_tokens"])
    assert call["cost_usd"] == pytest.approx(prompt_usd + completion_usd) and call["cost_usd"] > 0


def test_a_replay_answers_from_the_recorded_run_without_any_network(tmp_path, monkeypatch):
    with FakeLLMServer(answers()) as server:
        config = write_config(tmp_path, NO_KNOBS)
        first = evokernel("run", config, "--model", "openai/fake", "--api-base", server.api_base,
                          "--runs-dir", tmp_path / "recorded")
        api_base = server.api_base
    assert first.exit_code == 0, first.output
    recorded_dir = only_run(tmp_path / "recorded")
    with Store(recorded_dir, readonly=True) as store:
        recorded: dict[str, list[str]] = {}
        for call in store.llm_calls():
            if call["response"] is not None:
                recorded.setdefault(call["question_key"], []).append(call["response"])

    def no_network(*args, **kwargs):
        raise AssertionError("a replay called a model")

    monkeypatch.setattr(LLMClient, "_complete", no_network)
    replay = evokernel("run", config, "--model", "openai/fake", "--api-base", api_base, "--replay", recorded_dir,
                       "--runs-dir", tmp_path / "replayed")
    assert replay.exit_code == 0, replay.output
    assert "with one short call each" not in replay.output  # no model check call either
    with Store(only_run(tmp_path / "replayed"), readonly=True) as store:
        calls = store.llm_calls()
        failed = store.llm_failures()
    replayed: dict[str, list[str]] = {}
    for call in calls:
        if call["cached"]:
            replayed.setdefault(call["question_key"], []).append(call["response"])
    assert replayed  # the n-th asking of a question got the n-th answer it got in the recorded run
    assert all(recorded[key][:len(responses)] == responses for key, responses in replayed.items())
    assert set(failed) <= {"not in the replayed run"}
    assert all(call["cost_usd"] == 0 for call in calls)


def test_replay_of_a_directory_that_is_no_run_is_one_line(tmp_path):
    config = write_config(tmp_path, NO_KNOBS)
    result = evokernel("run", config, "--model", "openai/fake", "--replay", tmp_path, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "not a run directory" in result.stderr


def test_litellm_is_imported_with_its_local_cost_map_and_no_warnings(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    code = ("import os; from evokernel.mutations.llm import _litellm; litellm = _litellm(); "
            "print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'], 'gpt-4o-mini' in litellm.model_cost)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"] and "cost map" not in out.stderr.lower(), out.stderr
