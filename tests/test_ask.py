"""Asking a running search a question (`evokernel ask`): a person's question, put from another process while
a run goes on, reaches the model with the target kernel's source, its child is evaluated and its lineage
names the question; refused questions, unknown runs and targets are one-line errors; the queue survives a
driver that is not running; older runs still open; a question whose child beat its parent is offered for a
bank. All LLM traffic goes to tests/fake_llm_server.py on 127.0.0.1."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.harness import get_task
from evokernel.search.question_queue import HumanQuestions
from evokernel.store import DB_NAME, SCHEMA_VERSION, Individual, Store, open_readonly
from evokernel.source import normalized_hash, source_hash
from evokernel.store.inbox import INBOX_NAME
from fake_llm_server import FakeLLMServer

ORIGINAL = get_task("attention-fwd-cpu").original.read_text()
HUMAN = "Does the inner loop over keys reload the query row from memory for every key block?"


def evokernel_process(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evokernel.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def answers() -> list[str]:
    """Slow answers, each a different valid child of the CPU task's original kernel."""
    out = []
    for q, k in itertools.product([1, 2, 8, 16], [4, 16, 32]):
        child = ORIGINAL.replace("#define BLOCK_Q 4 ", f"#define BLOCK_Q {q} ").replace(
            "#define BLOCK_K 8 ", f"#define BLOCK_K {k} ")
        out.append({"delay": 1.0, "content": f"Hypothesis: the tile shape.\n```c\n{child}```\n"})
    return out


def wait_for_a_correct_kernel(runs: Path, process: subprocess.Popen) -> Path:
    """The run directory, once its seed is evaluated (the run started by `process`)."""
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        for db in runs.glob(f"*/{DB_NAME}"):
            try:
                with open_readonly(db.parent) as store:
                    if store.best(1):
                        return db.parent
            except (sqlite3.Error, Exception):  # the database is being made
                pass
        time.sleep(0.2)
    raise AssertionError(f"no correct kernel: {process.communicate()[1] if process.poll() is not None else 'timeout'}")


@pytest.mark.slow
def test_a_question_asked_from_another_process_is_put_to_the_model_and_its_child_evaluated(tmp_path):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "250"}
    with FakeLLMServer(answers()) as server:
        config = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4,
                  "operators": {"knob-mutation": 0, "knob-crossover": 0, "question-mutation": 1,
                                "question-crossover": 0, "repair": 0},
                  "triggers": {"propose_questions": False},
                  "llm": {"models": [{"model": "openai/fake", "api_base": server.api_base}], "max_retries": 0,
                          "max_concurrent": 1},
                  "budget": {"evaluations": 10},
                  "resources": {"evaluator": "local", "gpus_per_evaluation": 0, "max_parallel": 1,
                                "evaluation_timeout_s": 60}}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        run = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", "config.yaml", "--runs-dir", "runs",
                                "--no-llm-check"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            run_dir = wait_for_a_correct_kernel(tmp_path / "runs", run)
            asked = evokernel_process("ask", str(run_dir), HUMAN, cwd=tmp_path, env=env)
            assert asked.returncode == 0, asked.stderr
            assert "queued" in asked.stdout and "next free proposal slot" in asked.stdout
            out, err = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode == 0, out[-2000:] + err[-2000:]
        prompts = [request["messages"][0]["content"] for request in server.requests]
    with Store(run_dir, readonly=True) as store:
        children = [row for row in store.individuals() if row.trigger == "human"]
        assert len(children) == 1, [(row.id, row.trigger) for row in store.individuals()]
        child = children[0]
        parent = store.individual(child.parent_ids[0])
        # the question opens the prompt that asks it (later prompts may name it in a kernel's history)
        asked_prompts = [prompt for prompt in prompts if prompt.startswith(f"# Question\n{HUMAN}\n")]
        assert len(asked_prompts) == 1 and store.source(parent).strip() in asked_prompts[0]
        assert child.status in ("correct", "rejected") and child.question_id.startswith("human-")
        [request] = store.human_questions()
        assert request.text == HUMAN and request.outcomes == [{"child": child.id}] and request.received_at
    assert not list((run_dir / INBOX_NAME).glob("*.json"))  # taken from the queue
    lineage = evokernel_process("lineage", str(run_dir), "--id", str(child.id), cwd=tmp_path, env=env)
    assert HUMAN in lineage.stdout and "asked by a person" in lineage.stdout, lineage.stdout
    listed = evokernel_process("ask", str(run_dir), "--list", cwd=tmp_path, env=env)
    row = next(line for line in listed.stdout.splitlines() if HUMAN in line).split("\t")
    assert row[1] == "answered" and row[5] == "1/1" and row[6].startswith(f"#{child.id}"), listed.stdout


# -- a run made in place (no search), for the commands and the driver's queue ------------------------

def make_run(run_dir: Path, children: list[float] = ()) -> Path:
    """A run with a correct seed (#1, speedup 1.0) and children of it with the given speedups."""
    with Store(run_dir, create=True) as store:
        store.set_meta("status", "stopped")
        store.set_meta("config", {"llm": {"models": [{"model": "openai/fake"}]}})
        for n, speedup in enumerate([1.0, *children]):
            source = ORIGINAL + f"// variant {n}\n" + ("int v%d;\n" % n)
            row = Individual(operator="seed" if n == 0 else "question-mutation", source_hash=source_hash(source),
                             normalized_hash=normalized_hash(source), language="c", parent_ids=[1] if n else [],
                             question_id=None if n == 0 else HUMAN_ID, trigger=None if n == 0 else "human")
            kernel_id = store.add_individual(row, source)
            store.record_result(kernel_id, {"correct": True, "geomean_speedup": speedup, "scenarios": []})
    return run_dir


def invoke(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


from evokernel.bank.asked_questions import human_question_id  # noqa: E402  (the id the children above carry)

HUMAN_ID = human_question_id(HUMAN)


def test_a_command_is_refused_with_the_reason_and_nothing_is_queued(tmp_path):
    run_dir = make_run(tmp_path / "run")
    code, out, err = invoke("ask", run_dir, "Make it faster.")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: question refused: is a command")
    assert not (run_dir / INBOX_NAME).exists()


@pytest.mark.parametrize("args, says", [
    (["ask", "no-such-run", HUMAN], "error: no run 'no-such-run'"),
    (["ask", "{run}", HUMAN, "--target", "9"], "has no kernel 9"),
    (["ask", "{run}", HUMAN, "--target", "first"], "--target 'first': expected 'best' or a kernel id"),
    (["ask", "{run}", HUMAN, "--times", "0"], "--times 0: expected 1 to 20"),
    (["ask", "{run}", HUMAN, "--times", "two"], "--times 'two'"),
    (["ask", "{run}", HUMAN, "--layer", "cache"], "--layer 'cache'"),
    (["ask", "{run}"], "give the QUESTION"),
    (["ask", "{run}", HUMAN, "--list"], "give either QUESTION or --list"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    run_dir = make_run(tmp_path / "run")
    code, out, err = invoke(*[str(run_dir) if a == "{run}" else a for a in args])
    assert code == 2 and err.count("\n") == 1 and says in err, err


def test_a_queued_question_is_listed_then_taken_by_the_driver_once(tmp_path):
    run_dir = make_run(tmp_path / "run")
    code, out, err = invoke("ask", run_dir, HUMAN, "--target", "1", "--times", "2", "--layer", "memory")
    assert code == 0 and "queued" in out and "resumed" in out, out + err
    code, out, _ = invoke("ask", run_dir, "--list")
    row = next(line for line in out.splitlines() if HUMAN in line).split("\t")
    assert row[1] == "queued" and row[4] == "#1" and row[5] == "0/2"
    [queued] = list((run_dir / INBOX_NAME).glob("*.json"))
    (run_dir / INBOX_NAME / "scribble.json").write_text("{not json")
    notes: list[str] = []
    with Store(run_dir) as store:
        human = HumanQuestions(run_dir, store, notes.append)
        human.poll()
        assert not queued.exists() and (run_dir / INBOX_NAME / "scribble.json.unreadable").exists()
        [request] = human.waiting()
        assert request.target == "1" and request.times == 2 and request.layers == ["memory"]
        question = human.started(request)
        assert question.text == HUMAN and question.id == HUMAN_ID
        human.finished(request.id, {"failed": "no kernel in the answer"})
        assert [q.id for q in human.waiting()] == [request.id]  # asked once of twice
    with Store(run_dir) as store:  # the next session
        human = HumanQuestions(run_dir, store, notes.append)
        human.restore()
        assert [q.asked for q in human.waiting()] == [1]
    assert any("scribble.json" in line for line in notes) and any(HUMAN in line for line in notes)
    code, out, _ = invoke("ask", run_dir, "--list", "--json")
    [listed] = json.loads(out)
    assert listed["status"] == "received" and listed["produced"] == ["failed: no kernel in the answer"]


def test_a_person_s_question_whose_child_beat_its_parent_is_offered_for_a_bank(tmp_path):
    run_dir = make_run(tmp_path / "run", children=[0.9, 1.2])
    with Store(run_dir) as store:
        from evokernel.bank.asked_questions import make_request

        request = make_request(HUMAN, "best", 2, ["memory"])
        request.received_at, request.outcomes = time.time(), [{"child": 2}, {"child": 3}]
        store.add_human_question(request)
    code, out, _ = invoke("bank", "review", run_dir)
    row = next(line for line in out.splitlines() if HUMAN_ID in line).split("\t")
    assert row[1] == "proposed" and row[2] == "person" and row[3] == "3", out
    code, out, err = invoke("bank", "review", run_dir, "--accept", HUMAN_ID, "--bank", tmp_path / "bank")
    assert code == 0, err
    accepted = yaml.safe_load((tmp_path / "bank" / f"{HUMAN_ID}.yaml").read_text())["questions"][0]
    assert accepted["text"] == HUMAN and accepted["layers"] == ["memory"] and "asked by a person" in accepted["notes"]
    code, out, _ = invoke("show", run_dir, "3")
    assert f"question {HUMAN_ID} (asked by a person): {HUMAN}" in out


def test_a_run_recorded_before_people_could_ask_still_opens_and_takes_questions(tmp_path):
    run_dir = make_run(tmp_path / "run")
    with sqlite3.connect(run_dir / DB_NAME) as db:  # as schema version 1 wrote it
        db.execute("DROP TABLE human_questions")
        db.execute("PRAGMA user_version = 1")
    assert invoke("lineage", run_dir)[0] == 0
    code, out, _ = invoke("ask", run_dir, "--list")
    assert code == 0 and "no question asked by a person" in out
    assert invoke("ask", run_dir, HUMAN)[0] == 0
    with Store(run_dir) as store:  # a writer (--resume) migrates it
        assert store.schema_version == SCHEMA_VERSION
        human = HumanQuestions(run_dir, store, lambda line: None)
        human.poll()
        assert [q.text for q in human.waiting()] == [HUMAN]
