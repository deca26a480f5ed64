"""`evokernel serve`: the JSON API gives what the `--json` commands print, on a run a live search is writing (a
scripted model on 127.0.0.1) and on a run stopped and resumed; the actions (ask, answer, accept into a bank) land
where the command line puts them and are refused without the token; nothing outside the runs directory can be
read; bad input is one line with exit code 2 and writes nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.store import DB_NAME, Store
from evokernel.store.inbox import INBOX_NAME
from evokernel.web import ServedRuns, Server
from evokernel.web.actions import TOKEN_HEADER
from fake_llm_server import FakeLLMServer
from test_answerers import edit, project, unroll_of
from test_ask import HUMAN, answers, make_run, wait_for_a_correct_kernel

ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "250"}
QUESTION = "Does the inner loop over keys reload the query row from memory for every key block?"


@contextmanager
def serving(spec: Path, bank_dir: Path | None = None):
    """A server on 127.0.0.1 (a free port) in a thread, stopped on the way out; yields (server, client)."""
    server = Server(ServedRuns.from_spec(spec), "127.0.0.1", 0, bank_dir)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    client = httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30)
    try:
        deadline = time.monotonic() + 20
        while not server.uvicorn.started and time.monotonic() < deadline:
            time.sleep(0.05)
        yield server, client
    finally:
        client.close()
        server.stop()
        thread.join(10)
    assert not thread.is_alive()


def cli_json(*args) -> object:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def post(client: httpx.Client, path: str, body: dict, token: str | None) -> httpx.Response:
    return client.post(path, json=body, headers={TOKEN_HEADER: token} if token is not None else {})


def search_config(tmp_path: Path, api_base: str, evaluations: int) -> Path:
    """A search of question operators only, whose model is the scripted server (answers about a second apart)."""
    config = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4,
              "operators": {"knob-mutation": 0, "knob-crossover": 0, "question-mutation": 1,
                            "question-crossover": 0, "repair": 0},
              "triggers": {"propose_questions": False},
              "llm": {"models": [{"model": "openai/fake", "api_base": api_base}], "max_retries": 0,
                      "max_concurrent": 1},
              "budget": {"evaluations": evaluations},
              "resources": {"evaluator": "local", "gpus_per_evaluation": 0, "max_parallel": 1,
                            "evaluation_timeout_s": 60}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "config.yaml"


@contextmanager
def live_search(tmp_path: Path, evaluations: int = 10):
    """A search started in another process with the scripted model; yields (process, run directory) once its seed
    is evaluated, and ends the process on the way out if it still runs."""
    with FakeLLMServer(answers()) as llm:
        config = search_config(tmp_path, llm.api_base, evaluations)
        driver = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", str(config), "--runs-dir", "runs",
                                   "--no-llm-check"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            yield driver, wait_for_a_correct_kernel(tmp_path / "runs", driver)
        finally:
            if driver.poll() is None:
                driver.kill()
            driver.communicate()


def human_children(run_dir: Path) -> list:
    with Store(run_dir, readonly=True) as store:
        return [row for row in store.individuals() if row.trigger == "human"]


@pytest.mark.slow
def test_a_live_search_read_and_asked_through_the_api(tmp_path):
    with live_search(tmp_path) as (driver, run_dir), serving(tmp_path / "runs") as (server, client):
        run = run_dir.name
        listed = client.get("/api/runs").json()
        assert [r["id"] for r in listed["runs"]] == [run] and listed["runs"][0]["status"] == "running"
        first = client.get(f"/api/runs/{run}").json()
        assert first["summary"]["status"] == "running" and first["charts"]["graph"]["nodes"]
        stamp = client.get(f"/api/runs/{run}/stamp").json()["stamp"]
        # refused: no token, a wrong token, a question the lint refuses; nothing is queued
        for token, status in ((None, 401), ("not-the-token", 403)):
            refused = post(client, f"/api/runs/{run}/ask", {"question": QUESTION}, token)
            assert refused.status_code == status and "token" in refused.json()["error"]
        refused = post(client, f"/api/runs/{run}/ask", {"question": "Make it faster."}, server.token)
        assert refused.status_code == 400 and refused.json()["error"].startswith("question refused")
        assert not list((run_dir / INBOX_NAME).glob("*.json")) and not human_children(run_dir)
        asked = post(client, f"/api/runs/{run}/ask", {"question": QUESTION}, server.token)
        assert asked.status_code == 200 and "next free proposal slot" in asked.json()["message"], asked.text
        queued = client.get(f"/api/runs/{run}").json()["asked"]
        assert [(q["id"], q["text"]) for q in queued] == [(asked.json()["id"], QUESTION)]
        driver.wait(300)
        assert driver.returncode == 0
        # the run grew while it was watched, and the question asked from the API made a child
        last = client.get(f"/api/runs/{run}").json()
        assert len(last["charts"]["graph"]["nodes"]) > len(first["charts"]["graph"]["nodes"])
        assert client.get(f"/api/runs/{run}/stamp").json()["stamp"] != stamp
        assert last["summary"]["status"] != "running"
        [child] = human_children(run_dir)
        assert last["asked"][0]["outcomes"] == [{"child": child.id}]
        edges = {(e["target"], e["label"]) for e in last["charts"]["graph"]["edges"]}
        assert (child.id, child.question_id) in edges
        # the same JSON as the commands
        assert client.get(f"/api/runs/{run}/lineage").json() == cli_json("lineage", run_dir, "--tree", "--json")
        assert client.get(f"/api/runs/{run}/kernels/{child.id}").json() == cli_json("show", run_dir, child.id, "--json")
        assert listed_now(client) == cli_json("runs", tmp_path / "runs", "--json")
        assert last["asked"] == cli_json("ask", run_dir, "--list", "--json")
        assert last["bank_stats"] == cli_json("bank", "stats", run_dir, "--json")


def listed_now(client: httpx.Client) -> list:
    return client.get("/api/runs").json()["runs"]


@pytest.mark.slow
def test_a_prompt_answered_from_the_api_while_stopped_is_taken_when_the_run_is_resumed(tmp_path):
    config = project(tmp_path, "files", 2, max_open_prompts=1)
    ran = subprocess.run([sys.executable, "-m", "evokernel.cli", "run", str(config), "--runs-dir", "runs"],
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and "prompts wait for answers" in ran.stdout, ran.stdout + ran.stderr
    [run_dir] = list((tmp_path / "runs").iterdir())
    with serving(run_dir) as (server, client):
        run = run_dir.name
        assert client.get("/api/runs").json()["only"] == run
        [prompt] = [p for p in client.get(f"/api/runs/{run}").json()["prompts"] if p["status"] == "open"]
        assert prompt == next(p for p in cli_json("prompts", run_dir, "--all", "--json") if p["id"] == prompt["id"])
        text = client.get(f"/api/runs/{run}/prompts/{prompt['id']}").json()["prompt"]
        assert "#define UNROLL" in text
        path = f"/api/runs/{run}/prompts/{prompt['id']}/answer"
        good = {"answer": edit(unroll_of(prompt["file"]), 8), "by": "a tester"}
        assert post(client, path, good, None).status_code == 401
        assert post(client, path, good, "wrong").status_code == 403
        bad = post(client, path, {"answer": edit(99, 3)}, server.token)
        assert bad.status_code == 400 and "SEARCH text not found" in bad.json()["error"]
        assert not (run_dir / "answers").exists() or not list((run_dir / "answers").iterdir())
        given = post(client, path, good, server.token)
        assert given.status_code == 200 and "taken at evokernel run --resume" in given.json()["message"], given.text
        again = post(client, path, good, server.token)
        assert again.status_code == 400 and "already has an answer" in again.json()["error"]
        assert client.get(f"/api/runs/{run}").json()["summary"]["status"] != "running"
        # resumed: the page's stamp shows the driver while it runs, and the answer's child appears
        resumed = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", "--resume", str(run_dir)],
                                   cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stamps = set()
        while resumed.poll() is None:
            stamps.add(client.get(f"/api/runs/{run}/stamp").json()["stamp"])
            time.sleep(0.05)
        assert resumed.returncode == 0, resumed.stdout.read()[-3000:]
        assert any(s.endswith("running") for s in stamps), stamps
        doc = client.get(f"/api/runs/{run}").json()
        taken = next(p for p in doc["prompts"] if p["id"] == prompt["id"])
        assert taken["status"] == "answered" and taken["answered_by"] == "a tester"
        child = client.get(f"/api/runs/{run}/kernels/{taken['child_id']}").json()
        assert "#define UNROLL 8" in child["source"] and child["model"] == "files (a tester)"


def test_a_question_offered_for_a_bank_is_accepted_only_with_the_token_and_a_bank(tmp_path):
    from evokernel.bank.asked_questions import make_request

    run_dir = make_run(tmp_path / "runs" / "r1", children=[1.3])
    with Store(run_dir) as store:
        request = make_request(HUMAN, "best", 1, ["memory"])
        request.received_at, request.outcomes = time.time(), [{"child": 2}]
        store.add_human_question(request)
    question_id = request.question_id
    with serving(tmp_path / "runs") as (server, client):
        [offered] = client.get("/api/runs/r1").json()["review"]
        assert offered["id"] == question_id and offered["by"] == "person"
        path = f"/api/runs/r1/review/{question_id}/accept"
        assert post(client, path, {}, None).status_code == 401
        nowhere = post(client, path, {}, server.token)
        assert nowhere.status_code == 400 and "--bank DIR" in nowhere.json()["error"]
    with serving(tmp_path / "runs", bank_dir=tmp_path / "bank") as (server, client):
        assert post(client, path, {}, "wrong").status_code == 403 and not (tmp_path / "bank").exists()
        unknown = post(client, "/api/runs/r1/review/no-such-question/accept", {}, server.token)
        assert unknown.status_code == 400 and "has no proposed question" in unknown.json()["error"]
        accepted = post(client, path, {}, server.token)
        assert accepted.status_code == 200, accepted.text
        assert [p.stem for p in (tmp_path / "bank").glob("*.yaml")] == [question_id]
        assert client.get("/api/runs/r1").json()["review"][0]["status"] == "accepted"
    listed = CliRunner().invoke(main, ["bank", "list", "--bank", str(tmp_path / "bank"), "--no-builtin", "--json"])
    assert [q["id"] for q in json.loads(listed.stdout)] == [question_id]


def test_nothing_outside_the_runs_directory_is_served(tmp_path):
    make_run(tmp_path / "runs" / "r1")
    make_run(tmp_path / "elsewhere")
    (tmp_path / "runs" / "linked").symlink_to(tmp_path / "elsewhere")
    with Store(tmp_path / "runs" / "r1") as store:
        store.update_individual(1, failure="<script>alert(1)</script>")
    with serving(tmp_path / "runs") as (server, client):
        assert client.get("/api/runs/r1").status_code == 200
        for path in ("/api/runs/elsewhere", "/api/runs/linked", "/api/runs/..", "/api/runs/.%2E",
                     "/api/runs/..%2Felsewhere", "/api/runs/r1%2F..%2F..%2Felsewhere", "/runs/linked",
                     "/assets/..%2F__init__.py", "/assets/live.html", "/api/runs/r1/kernels/99"):
            response = client.get(path)
            assert response.status_code in (400, 404), (path, response.status_code)
            assert response.json()["error"] if response.headers["content-type"].startswith("application/json") else True
        # kernel text is data, never markup: JSON here, and the page puts it in with textContent
        shown = client.get("/api/runs/r1/kernels/1")
        assert shown.headers["content-type"] == "application/json" and shown.json()["failure"].startswith("<script>")
        assert "default-src 'self'" in shown.headers["content-security-policy"]
        # a page of another site that points its own name at 127.0.0.1 gets nothing
        assert client.get("/api/runs", headers={"Host": "attacker.example"}).status_code == 400
    with serving(tmp_path / "runs" / "r1") as (server, client):  # one run: the others are not shown
        assert client.get("/api/runs").json()["only"] == "r1"
        assert client.get("/api/runs/linked").status_code == 404


def invoke(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    make_run(tmp_path / "runs" / "r1")
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / DB_NAME).write_bytes(b"not a database at all" * 100)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        cases = [((tmp_path / "nope",), "no run or runs directory"),
                 ((tmp_path / "empty",), "is neither a run"),
                 ((tmp_path / "damaged",), "is not a readable evokernel database"),
                 ((tmp_path / "runs", "--port", port), f"port {port} on 127.0.0.1 is in use"),
                 ((tmp_path / "runs", "--host", "203.0.113.9", "--port", 0), "cannot listen on 203.0.113.9")]
        for args, says in cases:
            code, err = invoke("serve", *args)
            assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (args, code, err)
    assert list((tmp_path / "damaged").iterdir()) == [tmp_path / "damaged" / DB_NAME]


def test_serve_prints_the_address_with_its_token_and_stops_on_ctrl_c(tmp_path):
    run_dir = make_run(tmp_path / "runs" / "r1")
    server = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "serve", str(run_dir), "--port", "0"],
                              cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+)/runs/r1#token=([\w-]+)", line)
        assert url, line + server.stderr.read() if server.poll() is not None else line
        base, token = url.groups()
        assert "evokernel run r1" not in httpx.get(base + "/runs/r1").text  # the page, filled in by its script
        assert httpx.get(base + "/api/runs/r1").json()["summary"]["id"] == "r1"
        refused = httpx.post(base + "/api/runs/r1/ask", json={"question": "Make it faster."}, headers={TOKEN_HEADER: token})
        assert refused.status_code == 400 and not (run_dir / INBOX_NAME).exists()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)
    assert server.returncode == 0, server.stderr.read()


def test_a_damaged_run_among_others_is_a_readable_error_on_the_page(tmp_path):
    make_run(tmp_path / "runs" / "r1")
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / DB_NAME).write_bytes(b"overwritten" * 1000)
    with serving(tmp_path / "runs") as (server, client):
        statuses = {r["id"]: r["status"] for r in client.get("/api/runs").json()["runs"]}
        assert statuses["r1"] == "stopped" and statuses["broken"].startswith("unreadable: ")
        broken = client.get("/api/runs/broken")
        assert broken.status_code == 400 and "is not a readable evokernel database" in broken.json()["error"]
        refused = post(client, "/api/runs/broken/ask", {"question": QUESTION}, server.token)
        assert refused.status_code == 400 and not (tmp_path / "runs" / "broken" / INBOX_NAME).exists()
