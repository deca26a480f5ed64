"""A synthetic run written through the Store API, shared by the lineage and report tests.

Lineage (fitness = geomean speedup over the original):
    #1 seed 1.0 ─ #2 knob-mutation 1.2 ─ #3 question-mutation q-layer 1.6 ─┬ #4 question-mutation q-limit REJECTED ─ #5 repair 1.5
                 └ #7 knob-mutation REJECTED (does not compile)          └ #6 question-crossover q-layer (+#2) 1.8
    #8 pending child of #6; an answered LLM call (q-verify) that gave no child, and a failed attempt.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from evokernel.lineage import Lineage
from evokernel.store import Individual, LLMCall, Store
from evokernel.source import normalized_hash, source_hash

SCENARIOS = ("b1_h4_s128_d64", "b2_h8_s256_d64", "b1_h4_s512_d128_causal")
QUESTION_TEXT = "Which layer of the system limits this kernel: memory, compute, or launch?"


def kernel_source(tag: str, body: str) -> str:
    return (f"// kernel {tag}\n#include \"evk_attention_cpu.h\"\n\nint evk_attention_fwd(const float *q) {{\n"
            f"    int block = {body};\n    return block;\n}}\n")


def report(speedups: list[float] | None, failure: str | None = None, failing: int | None = None) -> dict:
    scenarios = []
    for n, name in enumerate(SCENARIOS):
        if failing is not None and n > failing:
            break
        ok = failing is None or n < failing
        speed = speedups[n] if speedups else None  # the harness times only kernels that verified
        scenarios.append({"name": name, "correct": ok, "rel_err": 1e-6 if ok else 0.3, "max_err": 1e-5 if ok else 2.0,
                          "time_ms": speed and 2.0 / speed, "original_time_ms": speed and 2.0, "speedup": speed,
                          "spread": speed and 0.004,
                          "error": None if ok else "max error 2 against the reference exceeds 0.01"})
    correct = failure is None
    fitness = math.exp(sum(math.log(s["speedup"]) for s in scenarios) / len(scenarios)) if correct else None
    return {"task": "attention-fwd-cpu", "kernel": "<source>", "scenario_set": "quick", "correct": correct,
            "geomean_speedup": fitness, "failure": failure, "scenarios": scenarios if speedups or failing is not None
            else [], "build_log": "gcc -O3 ok" if failure is None or failing is not None else "x.c:5: error: expected ';'",
            "device": "cpu", "check_seconds": 1.5}


def add(store: Store, operator: str, parents: list[int], tag: str, body: str, result: dict | None = None,
        **fields) -> int:
    source = kernel_source(tag, body)
    ind = Individual(operator=operator, source_hash=source_hash(source), normalized_hash=normalized_hash(source),
                     language="c", parent_ids=parents, **fields)
    new_id = store.add_individual(ind, source)
    if result is not None:
        store.record_result(new_id, result, worker="w0", started_at=time.time() - 1.0)
    return new_id


def make_run(run_dir: Path, close: bool = True) -> Store:
    """Write the synthetic run into `run_dir`; returns the (open unless `close`) writing store."""
    store = Store(run_dir, create=True)
    store.set_meta("status", "done")
    store.set_meta("task", "attention-fwd-cpu")
    store.set_meta("started_at", 1_764_000_000.0)
    store.add_proposed_question("q-layer", QUESTION_TEXT, ["stagnation"], ["memory"], None)
    seed = add(store, "seed", [], "seed", "16", report([1.0, 1.0, 1.0]), generation=0)
    knob = add(store, "knob-mutation", [seed], "k32", "32", report([1.5, 1.2, 0.95]), generation=1,
               knobs={"BLOCK": 32})
    call = store.add_llm_call(LLMCall(model="openai/test-model", prompt=f"Question: {QUESTION_TEXT}\n<kernel>",
                                      response="```c\nint block = 64;\n```", operator="question-mutation",
                                      question_id="q-layer", parent_ids=[knob], prompt_tokens=1200,
                                      completion_tokens=300, cost_usd=0.0125, latency_s=4.2))
    asked = add(store, "question-mutation", [knob], "q64", "64", report([2.0, 1.2, 1.7]), generation=2,
                question_id="q-layer", trigger="stagnation", model="openai/test-model", llm_call_id=call)
    wrong = add(store, "question-mutation", [asked], "limit", "128",
                report(None, failure=f"{SCENARIOS[1]}: max error 2 against the reference exceeds 0.01", failing=1),
                generation=3, question_id="q-limit", trigger="declared-limit", model="openai/test-model")
    add(store, "repair", [wrong], "repaired", "96", report([1.9, 1.1, 1.6]), generation=4, model="openai/test-model")
    add(store, "question-crossover", [asked, knob], "cross", "80", report([2.2, 1.4, 1.9]), generation=3,
        question_id="q-layer", model="openai/test-model")
    add(store, "knob-mutation", [seed], "broken", "8 +", report(None, failure="candidate does not compile: x.c:5: "
                                                                 "error: expected ';'"), generation=1)
    add(store, "question-mutation", [6], "pending", "88", None, generation=4, question_id="q-layer")
    store.add_llm_call(LLMCall(model="openai/test-model", prompt="Question: verify?",
                               response="The kernel is already optimal.", operator="question-mutation",
                               question_id="q-verify", error="no code block", cost_usd=0.002))
    store.add_llm_call(LLMCall(model="openai/test-model", prompt="Question: verify?", response=None,
                               operator="question-mutation", question_id="q-verify",
                               error="RateLimitError: 429 (retried)", cost_usd=0.0))
    if close:
        store.close()
    return store


def test_synthetic_run_has_the_documented_shape(tmp_path):
    make_run(tmp_path / "r")
    with Lineage(tmp_path / "r") as run:
        assert [i.status for i in run.individuals.values()] == [
            "correct", "correct", "correct", "rejected", "correct", "correct", "rejected", "pending"]
        assert run.best().id == 6
        assert run.individuals[4].failure.startswith(SCENARIOS[1])
