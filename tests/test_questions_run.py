"""As a new user would: add a question to a user bank, run a search whose LLM is a local scripted
server, and see the question asked in `evokernel bank stats` and the LLM's proposed question in review."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import yaml

from evokernel.harness import get_task
from fake_llm_server import FakeLLMServer

QUESTION = ("Do neighbouring query blocks reuse the same K and V rows from the cache, "
            "or does each fetch them again from memory?")
PROPOSED = "Does the key block fit in the L1 cache together with the query block for every head dimension?"


def answers() -> list[str]:
    source = get_task("attention-fwd-cpu").original.read_text()
    out = []
    for q, k in itertools.product([1, 2, 8, 16], [4, 16, 32]):
        child = source.replace("#define BLOCK_Q 4 ", f"#define BLOCK_Q {q} ").replace("#define BLOCK_K 8 ",
                                                                                    f"#define BLOCK_K {k} ")
        out.append(f"Hypothesis: the tile shape.\n```c\n{child}```\n"
                   f'<new-question triggers="stagnation" layers="memory">{PROPOSED}</new-question>')
    return out


def evokernel(*args: str, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evokernel.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=400)


@pytest.mark.slow
def test_a_user_question_is_asked_in_a_run_and_shows_in_bank_stats(tmp_path):
    env = {**os.environ, "EVK_FAKE_KEY": "test", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "250"}
    added = evokernel("bank", "add", "--bank", "ubank", "--id", "l2-reuse", "--text", QUESTION,
                      "--trigger", "default", "--trigger", "stagnation", "--layer", "memory", cwd=tmp_path, env=env)
    assert added.returncode == 0, added.stderr
    listed = evokernel("bank", "list", "--bank", "ubank", cwd=tmp_path, env=env)
    assert "l2-reuse" in listed.stdout
    with FakeLLMServer(answers()) as server:
        config = {"name": "e2e", "task": "attention-fwd-cpu", "population_size": 4, "trials": 1,
                  "operators": {"knob-mutation": 0, "knob-crossover": 0, "question-mutation": 1,
                                "question-crossover": 0, "repair": 0},
                  "llm": {"models": [{"model": "openai/fake", "api_base": server.api_base, "api_key_env": "EVK_FAKE_KEY"}],
                          "retry_backoff_s": 0},
                  "bank": {"builtin": False, "dirs": ["ubank"]}, "budget": {"evaluations": 6},
                  "resources": {"gpus_per_evaluation": 0, "max_parallel": 2}}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        ran = evokernel("run", "config.yaml", "--runs-dir", "runs", cwd=tmp_path, env=env)
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        asked = sum(1 for request in server.requests  # questions, not a check call before the search
                    if request["messages"][0]["content"].startswith("# Question"))
    [run_dir] = list((tmp_path / "runs").iterdir())
    assert asked >= 1 and list((run_dir / "llm_cache").glob("*.json"))
    stats = evokernel("bank", "stats", str(run_dir), cwd=tmp_path, env=env)
    assert stats.returncode == 0, stats.stderr
    row = next(line for line in stats.stdout.splitlines() if "l2-reuse" in line)
    cells = row.split("\t")  # piped output: one tab-separated line per question
    assert int(cells[1]) == asked and int(cells[2]) >= 1 and "neighbouring query blocks" in stats.stdout
    review = evokernel("bank", "review", str(run_dir), cwd=tmp_path, env=env)
    better = int(cells[3])
    assert (PROPOSED[:40] in review.stdout) == (better > 0), review.stdout
