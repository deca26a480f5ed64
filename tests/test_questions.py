"""Question operators end to end: prompt -> real litellm -> scripted local server -> parsed child."""

from __future__ import annotations

import os
import random

import pytest

from evokernel.bank import TriggerMonitor
from evokernel.config import RunConfig
from evokernel.harness import get_task
from evokernel.mutations import Context, Parent, ProposalFailed, registered_operators
from evokernel.mutations.operators.questions import build_services
from evokernel.store import Store
from bank_helpers import add_kernel
from fake_llm_server import FakeLLMServer

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["EVK_FAKE_KEY"] = "test"
TASK = get_task("attention-fwd-cpu")
ORIGINAL = TASK.original.read_text()
REPORT = {"correct": True, "geomean_speedup": 1.25, "failure": None,
          "scenarios": [{"name": "d64-b1-h2-s33", "correct": True, "speedup": 1.31, "time_ms": 0.52, "spread": 0.02}]}


def run_config(server: FakeLLMServer, timeout_s: float = 5, **extra) -> RunConfig:
    return RunConfig(task=TASK.name, llm={"models": [{"model": "openai/fake", "api_base": server.api_base,
                                                       "api_key_env": "EVK_FAKE_KEY"}],
                                          "retry_backoff_s": 0, "timeout_s": timeout_s, "max_retries": 1}, **extra)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "run", create=True) as store:
        yield store


_SERVICES: list[tuple[RunConfig, dict]] = []  # holds each config, so no later config can be mistaken for it


def context(config: RunConfig, store: Store, trigger: str = "default", seed: int = 0) -> Context:
    """A context sharing one set of services per config, as in a run (one LLM client, one cache).

    Matched by identity, not by id(): a freed config's id is reused, and a later test would then talk to an
    earlier test's stopped server.
    """
    services = next((held for known, held in _SERVICES if known is config), None)
    if services is None:
        services = build_services(config, store)
        _SERVICES.append((config, services))
    return Context(rng=random.Random(seed), task=TASK, trigger=trigger,
                   store=store, services=services)


def parent(kernel_id: int = 1, source: str = ORIGINAL, report: dict | None = REPORT, fitness: float | None = 1.25):
    return Parent(id=kernel_id, source=source, fitness=fitness, report=report,
                  lineage="#1 seed\n#4 asked 'barrier-waits': 1.00 -> 1.25 (better)")


def test_question_operators_are_registered():
    registry = registered_operators()
    assert {"question-mutation", "question-crossover", "repair"} <= set(registry)
    assert registry["question-crossover"].factory(None).arity == 2 and registry["repair"].uses_llm


def test_full_file_answer_makes_a_child_with_the_question_recorded(store):
    child = ORIGINAL.replace("#define BLOCK_K 8 ", "#define BLOCK_K 16")
    with FakeLLMServer([f"The key loop reloads Q.\n```c\n{child}```\n"]) as server:
        config = run_config(server)
        op = registered_operators()["question-mutation"].factory(config)
        proposal = op([parent()], context(config, store, trigger="stagnation"))
        prompt = server.requests[0]["messages"][0]["content"]
    question = build_services(config, store)["bank"].get(proposal.question_id)
    assert "stagnation" in question.triggers and proposal.trigger == "stagnation"
    assert proposal.source == child and proposal.parent_ids == [1] and proposal.model == "openai/fake"
    assert not proposal.declared_limit
    call = store.llm_call(proposal.llm_call_id)
    assert call["question_id"] == question.id and call["operator"] == "question-mutation"
    # the question opens and closes the prompt; the kernel, results, lineage and contract are in between
    assert prompt.startswith(f"# Question\n{question.text}\n") and f"# The question again\n{question.text}" in prompt
    for part in ("#define BLOCK_K 8", "d64-b1-h2-s33 | yes | 1.310", "asked 'barrier-waits'",
                 "evk_attention_fwd", "<<<<<<< SEARCH", "<new-question"):
        assert part in prompt, part


def test_search_replace_answer_and_declared_limit(store):
    edit = "<<<<<<< SEARCH\n#define BLOCK_Q 4 \n=======\n#define BLOCK_Q 8 \n>>>>>>> REPLACE\n"
    with FakeLLMServer([edit, "This kernel is already optimal; no change can help."]) as server:
        config = run_config(server)
        op = registered_operators()["question-mutation"].factory(config)
        edited = op([parent()], context(config, store))
        limit = op([parent()], context(config, store))
    assert "#define BLOCK_Q 8" in edited.source and "#define BLOCK_Q 4 " not in edited.source
    assert edited.question_id and not edited.declared_limit
    assert limit.declared_limit and limit.source == ORIGINAL and limit.llm_call_id is not None


def test_each_question_about_a_kernel_is_a_new_one_while_the_bank_has_others(store):
    """A question already answered about a parent is not put about it again (its answer would be the same), even
    the bank's clear favourite; about another parent it is."""
    seed = add_kernel(store, "int seed;\n", 1.0)
    for index in range(30):  # weakest-scenario has paid every time in this run
        add_kernel(store, f"int child_{index};\n", 1.5, [seed], "weakest-scenario", "question-mutation")
    with FakeLLMServer(["Change: none. Nothing to gain."] * 4) as server:
        config = run_config(server)
        op = registered_operators()["question-mutation"].factory(config)
        asked = [op([parent(kernel_id=seed)], context(config, store, "stagnation", seed=n)).question_id
                 for n in range(3)]
        other = op([parent(kernel_id=seed + 1)], context(config, store, "stagnation")).question_id
    assert asked[0] == "weakest-scenario" and len(set(asked)) == 3 and other == "weakest-scenario"


def test_the_prompt_tells_the_questions_answers_outside_the_parents_history(store):
    """The operator asks the search for the question's earlier answers, leaving out the kernels its parents'
    histories already show, and the prompt gives them."""
    seen = []

    def answers_to(question_id: str, shown: set[int]) -> str:
        seen.append((question_id, shown))
        return "#9 from #8 by question-mutation: 1.100 -> 0.913 (-17.0%); change: K/V multicast"

    with FakeLLMServer(["Change: none."] * 2) as server:
        config = run_config(server)
        op = registered_operators()["question-mutation"].factory(config)
        with_context = context(config, store)
        with_context.answers_to = answers_to
        proposal = op([parent()], with_context)
        prompt = server.requests[0]["messages"][0]["content"]
    assert seen == [(proposal.question_id, {1, 4})]  # the parent and the kernels its lineage names
    assert "other kernels of this run (latest last)\n#9 from #8 by question-mutation" in prompt


def test_garbage_timeouts_and_rate_limits_are_recorded_failures(store):
    script = ["I am not sure what to do here.", {"status": 429}, {"status": 429}, {"delay": 2, "content": "late"}]
    with FakeLLMServer(script) as server:
        config = run_config(server, timeout_s=0.5)
        op = registered_operators()["question-mutation"].factory(config)
        failures = []
        for _ in range(3):
            with pytest.raises(ProposalFailed) as info:
                op([parent()], context(config, store))
            failures.append(info.value)
    assert "no code block" in str(failures[0]) and failures[0].llm_call_id is not None
    assert "RateLimitError" in str(failures[1]) and "Timeout" in str(failures[2])
    calls = store.llm_calls()  # one row per answer or failure; litellm retried the rate limit once
    assert [c["error"] is None for c in calls] == [True, False, False] and len(server.requests) == 4
    assert "RateLimitError" in calls[1]["error"] and "Timeout" in calls[2]["error"]
    assert [c["reason"] for c in calls] == [None, "rate limited", "timeout"]


def test_crossover_asks_a_crossover_question_about_both_parents(store):
    other = ORIGINAL.replace("#define THREADS 1 ", "#define THREADS 2 ")
    with FakeLLMServer([f"```c\n{other}```"]) as server:
        config = run_config(server)
        proposal = registered_operators()["question-crossover"].factory(config)(
            [parent(1), parent(2, other)], context(config, store))
        prompt = server.requests[0]["messages"][0]["content"]
    assert proposal.trigger == "crossover" and proposal.parent_ids == [1, 2]
    assert "crossover" in build_services(config, store)["bank"].get(proposal.question_id).triggers
    assert "Kernel A: kernel #1" in prompt and "Kernel B: kernel #2" in prompt and "#define THREADS 2 " in prompt


def test_repair_gets_the_error_and_is_bounded(store):
    failing_report = {"correct": False, "failure": "does not compile: error: expected ';'", "build_log": "x.c:3: error",
                      "scenarios": []}
    seed = add_kernel(store, ORIGINAL, 1.0)
    broken = add_kernel(store, ORIGINAL + "int broken\n", None, [seed], "barrier-waits", "question-mutation")
    with FakeLLMServer([f"```c\n{ORIGINAL}```", f"```c\n{ORIGINAL}// again\n```"]) as server:
        config = run_config(server, operators={"repair": {"max_attempts": 1}})
        repair = registered_operators()["repair"].factory(config)
        failing = parent(broken, ORIGINAL + "int broken\n", failing_report, None)
        proposal = repair([failing], context(config, store))
        prompt = server.requests[0]["messages"][0]["content"]
        add_kernel(store, proposal.source, 1.0, [broken], proposal.question_id, "repair")
        with pytest.raises(ProposalFailed, match="1 repairs already spent"):
            repair([failing], context(config, store))
        with pytest.raises(ProposalFailed, match="did not fail"):
            repair([parent()], context(config, store))
    assert proposal.trigger == "repair" and "expected ';'" in prompt and "x.c:3: error" in prompt
    assert len(server.requests) == 1


def test_a_child_that_beats_its_parent_files_the_proposed_question(store):
    answer = (f"```c\n{ORIGINAL}// faster\n```\n<new-question triggers=\"stagnation, bogus\" layers=\"memory\">"
              "Does every warp read the same K row from shared memory at the same time?</new-question>")
    with FakeLLMServer([answer, answer.replace("faster", "slower")]) as server:
        config = run_config(server)
        op = registered_operators()["question-mutation"].factory(config)
        better = op([parent()], context(config, store))
        worse = op([parent()], context(config, store, seed=1))
    monitor = TriggerMonitor(config.triggers, store)
    monitor.observe(10, 0.9, 0.8, worse)  # no gain: nothing filed
    assert store.proposed_questions() == []
    monitor.observe(11, 1.0, 1.1, better)
    [filed] = store.proposed_questions()
    assert filed["text"] == "Does every warp read the same K row from shared memory at the same time?"
    assert filed["triggers"] == ["stagnation"] and filed["layers"] == ["memory"]
    assert filed["status"] == "proposed" and filed["from_individual"] == 11


def test_a_question_crossover_pairs_kernels_each_with_code_the_other_lacks():
    """Of a kernel and one that holds it whole (#190 was #137 plus lines), or two that differ in knob values only,
    a crossover can only give one back: answerers said `Change: none`. Comments and indentation do not count."""
    from evokernel.mutations.operators.questions import QuestionCrossover

    base = "#define TILE 64  // @knob 32,64\nint f(int x) {\n  return x * TILE;\n}\n"
    kernels = {"base": base, "retuned": base.replace("TILE 64", "TILE 32"),
               "commented": base.replace("int f", "// why\nint  f").replace("  return", "      return"),
               "extended": base.replace("  return", "  x += 1;\n  return"),
               "changed": base.replace("x * TILE", "x + TILE")}
    mates = {(a, b) for a in kernels for b in kernels
             if a != b and QuestionCrossover.mates(parent(1, kernels[a]), parent(2, kernels[b]))}
    assert mates == {("base", "changed"), ("changed", "base"), ("retuned", "changed"), ("changed", "retuned"),
                     ("commented", "changed"), ("changed", "commented"), ("extended", "changed"),
                     ("changed", "extended")}
