"""Models that are not chat APIs: a command line (`cmd:`), and answers given as files (`files`) by a person or an
agent working beside the run, while it runs or between `--resume`s. Runs here use a copied task directory
(the rmsnorm example under another name) and the local evaluator."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from evokernel.config import LLMConfig, parse_config
from evokernel.errors import BadInput
from evokernel.mutations.command_model import CommandFailed, check_command, run_command
from evokernel.mutations.llm import LLMClient
from evokernel.store import Store

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "rmsnorm_cpu"
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "250"}
AGENT = '''import os, re, sys, pathlib
prompt = sys.stdin.read()
assert pathlib.Path(os.environ["EVOKERNEL_PROMPT_FILE"]).read_text() == prompt
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
value = re.search(r"#define UNROLL (\\d+)", prompt).group(1)
new = [1, 2, 8, 16, 3, 5, 6, 7][n % 8]
print(f"Unroll otherwise.\\n<<<<<<< SEARCH\\n#define UNROLL {value}\\n=======\\n#define UNROLL {new}\\n>>>>>>> REPLACE")
'''


def edit(old: int, new: int) -> str:
    return f"Unroll otherwise.\n<<<<<<< SEARCH\n#define UNROLL {old}\n=======\n#define UNROLL {new}\n>>>>>>> REPLACE\n"


def evokernel(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evokernel.cli", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=300, input=stdin)


def project(tmp_path: Path, model: str, evaluations: int, repair: float = 0, **llm) -> Path:
    """A user's folder: a task directory of their own and a config of question operators only."""
    shutil.copytree(EXAMPLE, tmp_path / "mytask")
    config = {"task": "mytask", "scenarios": "quick", "population_size": 2, "trials": 1,
              "operators": {"knob-mutation": 0, "knob-crossover": 0, "question-mutation": 1,
                            "question-crossover": 0, "repair": repair},
              "llm": {"models": [{"model": model}], **llm}, "budget": {"evaluations": evaluations},
              "resources": {"evaluator": "local"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "config.yaml"


def children(run_dir: Path) -> list:
    with Store(run_dir, readonly=True) as store:
        return [row for row in store.individuals() if row.operator != "seed"]


# -- the command model ---------------------------------------------------------------------------------------

def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "answerer.py"
    path.write_text(body)
    return f"cmd:{sys.executable} {path}"


def test_a_command_answers_on_stdout_or_in_the_answer_file(tmp_path):
    echo = script(tmp_path, "import sys; print('seen: ' + sys.stdin.read())")
    assert run_command(echo, "the prompt", 30).text.strip() == "seen: the prompt"
    to_file = script(tmp_path, "import os, pathlib\nprompt = pathlib.Path(os.environ['EVOKERNEL_PROMPT_FILE']).read_text()\n"
                               "pathlib.Path(os.environ['EVOKERNEL_ANSWER_FILE']).write_text('file: ' + prompt)\n"
                               "print('ignored')")
    assert run_command(to_file, "P", 30).text == "file: P"


@pytest.mark.parametrize("body, reason", [
    ("import sys; sys.stderr.write('boom'); sys.exit(3)", "command exited 3"),
    ("pass", "empty answer"),
    ("import sys; sys.stdout.buffer.write(b'\\xff\\xfe')", "answer not UTF-8"),
])
def test_a_command_that_fails_gives_its_reason(tmp_path, body, reason):
    with pytest.raises(CommandFailed) as info:
        run_command(script(tmp_path, body), "prompt", 30)
    assert info.value.reason == reason and ("boom" in str(info.value)) == (reason == "command exited 3")


def test_a_command_that_hangs_is_killed_with_what_it_started(tmp_path):
    marker = tmp_path / "child.pid"
    hang = script(tmp_path, "import subprocess, sys, time\n"
                            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                            f"open({str(marker)!r}, 'w').write(str(child.pid))\ntime.sleep(60)")
    started = time.monotonic()
    with pytest.raises(CommandFailed) as info:
        run_command(hang, "prompt", 1.5)
    assert info.value.reason == "timeout" and time.monotonic() - started < 10
    status = Path(f"/proc/{int(marker.read_text())}/status")
    time.sleep(0.2)  # the grandchild went with it (a zombie at most, where nothing reaps orphans)
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_a_missing_command_is_one_line_at_the_start(tmp_path):
    with pytest.raises(BadInput, match="command 'no-such-agent-x' not found"):
        check_command("cmd:no-such-agent-x --flag")
    with pytest.raises(BadInput, match=r"config.yaml: field 'llm.models.0': .*no command after 'cmd:'"):
        parse_config({"task": "attention-fwd-cpu", "llm": {"models": [{"model": "cmd:  "}]}}, "config.yaml")


def test_a_command_call_is_recorded_like_any_call(tmp_path):
    config = LLMConfig.model_validate({"models": [{"model": script(tmp_path, "print('x' * 400)"),
                                                   "usd_per_mtok_in": 1.0, "usd_per_mtok_out": 2.0}]})
    with Store(tmp_path / "run", create=True) as store:
        answer = LLMClient(config, store).ask("p" * 800, __import__("random").Random(0), operator="question-mutation",
                                              question_id="q1", parent_ids=[1], parent_hashes=["h"])
        call = store.llm_call(answer.call_id)
    assert answer.text.strip() == "x" * 400 and call["latency_s"] > 0 and call["error"] is None
    assert call["prompt_tokens"] == 200 and call["completion_tokens"] == 101  # estimated: 4 characters a token
    assert call["cost_usd"] == pytest.approx((200 * 1.0 + 101 * 2.0) / 1e6)


def test_the_same_question_about_the_same_kernels_is_not_posted_twice(tmp_path):
    from evokernel.mutations import AnswerPending, ProposalFailed
    config = LLMConfig.model_validate({"models": [{"model": "files"}], "max_open_prompts": 8})
    rng = __import__("random").Random(0)

    def ask(store, question: str, parent_hash: str):
        return LLMClient(config, store).ask(f"about {question}", rng, operator="question-mutation",
                                            question_id=question, parent_ids=[1], parent_hashes=[parent_hash])

    with Store(tmp_path / "run", create=True) as store:
        with pytest.raises(AnswerPending) as first:
            ask(store, "q1", "h")
        with pytest.raises(ProposalFailed) as repeat:
            ask(store, "q1", "h")
        assert str(repeat.value) == ("files: the same question about the same kernels waits for its answer "
                                     f"(prompt {first.value.prompt_id})")
        for question, parent_hash in (("q2", "h"), ("q1", "other parent")):  # another question, other kernels
            with pytest.raises(AnswerPending):
                ask(store, question, parent_hash)
        assert store.open_prompt_count() == 3
        store.close_prompt(first.value.prompt_id, "answered")
        with pytest.raises(AnswerPending):  # once answered, the question may be asked again
            ask(store, "q1", "h")


def test_the_same_question_asked_on_two_threads_at_once_is_posted_once(tmp_path, monkeypatch):
    """A run's proposals are made on threads, each with its own store connection, through one client."""
    import threading

    from evokernel.mutations import AnswerPending, ProposalFailed
    config = LLMConfig.model_validate({"models": [{"model": "files"}], "max_open_prompts": 8})
    client = LLMClient(config)
    looked_up = Store.open_prompt_for
    monkeypatch.setattr(Store, "open_prompt_for", lambda self, key: (time.sleep(0.3), looked_up(self, key))[1])
    Store(tmp_path / "run", create=True).close()
    outcomes: list[type] = []

    def ask() -> None:
        with Store(tmp_path / "run") as store:
            try:
                client.ask("about q1", __import__("random").Random(0), store=store, operator="question-mutation",
                           question_id="q1", parent_ids=[1], parent_hashes=["h"])
            except (AnswerPending, ProposalFailed) as outcome:
                outcomes.append(type(outcome))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(kind.__name__ for kind in outcomes) == ["AnswerPending", "ProposalFailed"]
    with Store(tmp_path / "run") as store:
        assert store.open_prompt_count() == 1


@pytest.mark.slow
def test_a_run_whose_question_children_come_from_a_command(tmp_path):
    (tmp_path / "agent.py").write_text(AGENT)
    config = project(tmp_path, f"cmd:{sys.executable} {tmp_path / 'agent.py'} {tmp_path / 'count'}", 4)
    ran = evokernel("run", str(config), "--runs-dir", "runs", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    [run_dir] = list((tmp_path / "runs").iterdir())
    made = children(run_dir)
    assert len(made) == 3 and all(row.operator == "question-mutation" and row.model.startswith("cmd:") for row in made)
    assert all(row.question_id and row.llm_call_id for row in made)
    assert int((tmp_path / "count").read_text()) >= 3


# -- the files model -----------------------------------------------------------------------------------------

def test_of_two_answers_given_at_once_one_lands(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from evokernel.store import prompt_box

    def give(n: int):
        try:
            return prompt_box.write_answer(tmp_path, "20261201T000000Z-abcdef", f"answer {n}", f"answerer {n}")
        except BadInput as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(give, range(8)))
    landed = [o for o in outcomes if isinstance(o, Path)]
    assert len(landed) == 1 and all("already has an answer" in str(o) for o in outcomes if o not in landed)
    text, by = prompt_box.read_answer(landed[0])
    assert text.startswith("answer ") and by == "answerer " + text.split()[-1]
    assert not [p for p in (tmp_path / "answers").iterdir() if p.name.startswith(".")]  # no partial left behind


def open_prompts(tmp_path: Path, run_dir: Path) -> list[dict]:
    listed = evokernel("prompts", str(run_dir), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    return [p for p in json.loads(listed.stdout) if p["status"] == "open"]


def wait_for(condition, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out")


def unroll_of(prompt_file: str) -> int:
    return int(re.search(r"#define UNROLL (\d+)", Path(prompt_file).read_text()).group(1))


@pytest.mark.slow
def test_files_answered_from_another_process_while_the_run_runs(tmp_path):
    config = project(tmp_path, "files", 3, answer_wait_s=120, max_open_prompts=2)
    driver = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", str(config), "--runs-dir", "runs"],
                              cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run_dir = wait_for(lambda: next(iter((tmp_path / "runs").glob("*/prompts/*.md")), None)).parent.parent
        answered = []
        for new in (8, 2):
            prompt = wait_for(lambda: [p for p in open_prompts(tmp_path, run_dir) if p["id"] not in answered])[0]
            assert len(open_prompts(tmp_path, run_dir)) <= 2  # llm.max_open_prompts
            (tmp_path / "answer.md").write_text(edit(unroll_of(prompt["file"]), new))
            given = evokernel("answer", str(run_dir), prompt["id"], "answer.md", "--by", "tester", cwd=tmp_path)
            assert given.returncode == 0, given.stderr
            answered.append(prompt["id"])
        output, _ = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 0, output[-3000:]
    made = children(run_dir)
    assert len(made) == 2 and {row.model for row in made} == {"files (tester)"}
    with Store(run_dir, readonly=True) as store:
        taken = {p.id: p for p in store.prompts()}
        calls = {call["id"]: call for call in store.llm_calls()}
    assert all(taken[i].status == "answered" and taken[i].child_id in {row.id for row in made} for i in answered)
    assert all(calls[row.llm_call_id]["latency_s"] > 0 and calls[row.llm_call_id]["question_key"] for row in made)


@pytest.mark.slow
def test_files_answers_survive_a_killed_driver_and_are_used_once(tmp_path):
    config = project(tmp_path, "files", 2, answer_wait_s=600, max_open_prompts=1)
    driver = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", str(config), "--runs-dir", "runs"],
                              cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_dir = wait_for(lambda: next(iter((tmp_path / "runs").glob("*/prompts/*.md")), None)).parent.parent
        prompt = wait_for(lambda: open_prompts(tmp_path, run_dir))[0]
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    (tmp_path / "answer.md").write_text(edit(unroll_of(prompt["file"]), 8))
    given = evokernel("answer", str(run_dir), prompt["id"], "answer.md", cwd=tmp_path)
    assert given.returncode == 0 and "taken at evokernel run --resume" in given.stdout, given.stdout + given.stderr
    again = evokernel("answer", str(run_dir), prompt["id"], "answer.md", cwd=tmp_path)
    assert again.returncode == 2 and "already has an answer" in again.stderr
    for _ in range(2):  # the second resume finds the answer used: no second child from it
        resumed = evokernel("run", "--resume", str(run_dir), cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    made = children(run_dir)
    assert [row.model for row in made] == ["files"]
    with Store(run_dir, readonly=True) as store:
        assert "#define UNROLL 8" in store.source(made[0])
        assert store.prompt(prompt["id"]).status == "answered" and store.prompt(prompt["id"]).child_id == made[0].id


@pytest.mark.slow
def test_bad_answers_are_one_line_errors_or_recorded_failures(tmp_path):
    config = project(tmp_path, "files", 2, max_open_prompts=2)
    ran = evokernel("run", str(config), "--runs-dir", "runs", cwd=tmp_path)  # stops at once: prompts wait
    assert ran.returncode == 0 and "prompts wait for answers" in ran.stdout, ran.stdout + ran.stderr
    [run_dir] = list((tmp_path / "runs").iterdir())
    first, second = open_prompts(tmp_path, run_dir)[:2]
    files = {"empty.md": b"  \n", "binary.md": b"\xff\xfe", "prose.md": b"I would unroll it.\n",
             "wrong-edit.md": edit(99, 3).encode()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    expected = {"empty.md": "the answer is empty", "binary.md": "not UTF-8", "prose.md": "no code block",
                "wrong-edit.md": "SEARCH text not found"}
    for name, message in expected.items():
        refused = evokernel("answer", str(run_dir), first["id"], name, cwd=tmp_path)
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.splitlines()) == 1
    unknown = evokernel("answer", str(run_dir), "20200101T000000Z-abcdef", "prose.md", cwd=tmp_path)
    assert unknown.returncode == 2 and "is not a prompt of run" in unknown.stderr
    # dropped by hand, past the command's checks: a recorded failure, and the run goes on
    (run_dir / "answers").mkdir(exist_ok=True)
    (run_dir / "answers" / f"{first['id']}.md").write_bytes(b"\xff\xfe")
    (run_dir / "answers" / f"{second['id']}.md").write_text("I would unroll it.")
    (run_dir / "answers" / "20200101T000000Z-abcdef.md").write_text(edit(4, 8))
    resumed = evokernel("run", "--resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "answers no prompt of this run" in resumed.stdout
    assert (run_dir / "answers" / "20200101T000000Z-abcdef.md.unused").is_file()
    with Store(run_dir, readonly=True) as store:
        reasons = {p.id: (p.status, p.reason) for p in store.prompts()}
    assert reasons[first["id"]][0] == "failed" and "not UTF-8" in reasons[first["id"]][1]
    assert reasons[second["id"]][0] == "failed" and "no code block" in reasons[second["id"]][1]
    late = evokernel("answer", str(run_dir), first["id"], "prose.md", cwd=tmp_path)
    assert late.returncode == 2 and "failed already" in late.stderr


@pytest.mark.slow
def test_new_prompts_wait_for_the_answers_children_and_withdrawn_prompts_are_replaced(tmp_path):
    config = project(tmp_path, "files", 6, max_open_prompts=2)
    assert evokernel("run", str(config), "--runs-dir", "runs", cwd=tmp_path).returncode == 0
    [run_dir] = list((tmp_path / "runs").iterdir())
    first = open_prompts(tmp_path, run_dir)
    for prompt, new in zip(first, (8, 2)):
        (tmp_path / "answer.md").write_text(edit(unroll_of(prompt["file"]), new))
        assert evokernel("answer", str(run_dir), prompt["id"], "answer.md", cwd=tmp_path).returncode == 0
    resumed = evokernel("run", "--resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    with Store(run_dir, readonly=True) as store:
        made = [row for row in store.individuals() if row.operator != "seed"]
        later = [p for p in store.prompts() if p.status == "open"]
    assert len(made) == 2 and len(later) == 2
    # written once both answers' children were evaluated: they can be about them, and say how they did
    assert min(p.created_at for p in later) >= max(row.finished_at for row in made)
    refused = evokernel("prompts", str(run_dir), "--withdraw", "20200101T000000Z-abcdef", cwd=tmp_path)
    assert refused.returncode == 2 and "not an open prompt" in refused.stderr
    withdrawn = evokernel("prompts", str(run_dir), "--withdraw", "open", "--by", "tester", cwd=tmp_path)
    assert withdrawn.returncode == 0, withdrawn.stderr
    again = evokernel("answer", str(run_dir), later[0].id, "answer.md", cwd=tmp_path)
    assert again.returncode == 2 and "already has an answer" in again.stderr
    resumed = evokernel("run", "--resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0 and "withdrawn by tester" in resumed.stdout, resumed.stdout[-3000:]
    with Store(run_dir, readonly=True) as store:
        statuses = {p.id: p.status for p in store.prompts()}
        assert len(store.individuals()) == 3  # a withdrawn prompt makes no child
    assert all(statuses[p.id] == "withdrawn" for p in later)
    assert sum(status == "open" for status in statuses.values()) == 2  # their places went to new prompts


@pytest.mark.slow
def test_a_child_rejected_in_an_earlier_session_gets_its_repair_prompt(tmp_path):
    config = project(tmp_path, "files", 2, repair=1, max_open_prompts=1)
    assert evokernel("run", str(config), "--runs-dir", "runs", cwd=tmp_path).returncode == 0
    [run_dir] = list((tmp_path / "runs").iterdir())
    [prompt] = open_prompts(tmp_path, run_dir)
    (tmp_path / "answer.md").write_text(edit(unroll_of(prompt["file"]), "4 +"))  # does not compile
    assert evokernel("answer", str(run_dir), prompt["id"], "answer.md", cwd=tmp_path).returncode == 0
    ended = evokernel("run", "--resume", str(run_dir), cwd=tmp_path)  # the child is rejected; the budget is spent
    assert ended.returncode == 0, ended.stdout[-3000:] + ended.stderr[-2000:]
    [child] = children(run_dir)
    assert child.status == "rejected" and not open_prompts(tmp_path, run_dir)
    resumed = evokernel("run", "--resume", str(run_dir), "--budget", "4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert [(p["operator"], p["parent_ids"]) for p in open_prompts(tmp_path, run_dir)] == [("repair", [child.id])]


@pytest.mark.slow
def test_a_note_put_on_a_kernel_while_prompts_wait_reaches_the_prompts_written_after_it(tmp_path):
    config = project(tmp_path, "files", 4, max_open_prompts=1)
    assert evokernel("run", str(config), "--runs-dir", "runs", cwd=tmp_path).returncode == 0
    [run_dir] = list((tmp_path / "runs").iterdir())
    [before] = open_prompts(tmp_path, run_dir)
    (tmp_path / "note.md").write_text("L1 hit rate 97%; stalls: long scoreboard 12%\n")
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe")
    for args, message in ((("9", "note.md"), "has no individual 9"), (("1", "missing.md"), "cannot read"),
                          (("1", "binary.md"), "not UTF-8"), (("x", "note.md"), "not a valid integer")):
        refused = evokernel("note", str(run_dir), *args, cwd=tmp_path)
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.splitlines()) == 1
    noted = evokernel("note", str(run_dir), "1", "-", "--by", "a profiler", cwd=tmp_path,
                      stdin=(tmp_path / "note.md").read_text())
    assert noted.returncode == 0, noted.stderr
    assert "long scoreboard 12%" in evokernel("note", str(run_dir), "1", cwd=tmp_path).stdout
    assert "long scoreboard 12%" in evokernel("show", str(run_dir), "1", cwd=tmp_path).stdout
    [shown] = json.loads(evokernel("show", str(run_dir), "1", "--json", cwd=tmp_path).stdout)["notes"]
    assert shown["by"] == "a profiler" and shown["kernel_id"] == 1
    assert "long scoreboard" not in Path(before["file"]).read_text()  # written before the note
    assert evokernel("prompts", str(run_dir), "--withdraw", "open", cwd=tmp_path).returncode == 0
    assert evokernel("run", "--resume", str(run_dir), cwd=tmp_path).returncode == 0
    [after] = open_prompts(tmp_path, run_dir)
    text = Path(after["file"]).read_text()
    assert "### Notes on it" in text and "From a profiler, " in text and "long scoreboard 12%" in text
