"""The LLM client through the real litellm against a scripted local server: answers, 429s, timeouts,
fallbacks, recorded tokens/cost/latency, the USD budget, and replay from the cache without a server."""

from __future__ import annotations

import os
import random

import pytest

from evokernel.config import LLMConfig
from evokernel.mutations import ProposalFailed
from evokernel.mutations.llm import BudgetExhausted, LLMClient
from evokernel.store import Store
from fake_llm_server import FakeLLMServer

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["EVK_FAKE_KEY"] = "test"


def model(server: FakeLLMServer, name: str = "fake", **extra) -> dict:
    return {"model": f"openai/{name}", "api_base": server.api_base, "api_key_env": "EVK_FAKE_KEY", **extra}


def llm_config(*models: dict, **extra) -> LLMConfig:
    settings = {"retry_backoff_s": 0, "timeout_s": 5, "max_retries": 2, **extra}
    return LLMConfig(models=list(models), **settings)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "run", create=True) as store:
        yield store


def test_answer_is_recorded_with_tokens_cost_and_latency(store):
    with FakeLLMServer(["first answer"]) as server:
        config = llm_config(model(server, usd_per_mtok_in=2.0, usd_per_mtok_out=10.0))
        client = LLMClient(config, store, store.run_dir / "llm_cache")
        answer = client.ask("Which tiles are masked?", random.Random(0), operator="question-mutation",
                            question_id="masked-tiles-computed", parent_ids=[3])
    assert (answer.text, answer.model, answer.cached) == ("first answer", "openai/fake", False)
    assert server.requests[0]["messages"][0]["content"] == "Which tiles are masked?"
    call = store.llm_call(answer.call_id)
    assert call["question_id"] == "masked-tiles-computed" and call["parent_ids"] == "[3]"
    assert call["prompt_tokens"] > 0 and call["completion_tokens"] > 0 and call["latency_s"] > 0
    expected = (2.0 * call["prompt_tokens"] + 10.0 * call["completion_tokens"]) / 1e6
    assert call["cost_usd"] == pytest.approx(expected) and store.total_cost() == pytest.approx(expected)


def test_rate_limits_are_retried_by_litellm_and_the_answer_recorded_once(store):
    with FakeLLMServer([{"status": 429}, {"status": 429}, "after the wait"]) as server:
        client = LLMClient(llm_config(model(server)), store)
        answer = client.ask("prompt", random.Random(0))
    assert answer.text == "after the wait" and len(server.requests) == 3
    [call] = store.llm_calls()
    assert call["error"] is None and call["response"] == "after the wait"


def test_a_wrong_key_is_not_retried_and_its_reason_is_recorded(store):
    with FakeLLMServer([{"status": 401}, "never asked"]) as server:
        client = LLMClient(llm_config(model(server)), store)
        with pytest.raises(ProposalFailed, match="authentication failed"):
            client.ask("prompt", random.Random(0))
    assert len(server.requests) == 1
    assert store.llm_failures() == {"authentication failed": 1}


def test_rate_limits_beyond_the_retries_fail_without_crashing(store):
    with FakeLLMServer([{"status": 429}] * 3) as server:
        client = LLMClient(llm_config(model(server)), store)
        with pytest.raises(ProposalFailed, match="RateLimitError") as info:
            client.ask("prompt", random.Random(0))
    assert len(server.requests) == 3 and info.value.llm_call_id == store.llm_calls()[-1]["id"]
    assert store.llm_failures() == {"rate limited": 1}


def test_timeout_falls_back_to_the_next_model(store):
    with FakeLLMServer([{"delay": 2.0, "content": "too late"}, "from the fallback"]) as server:
        config = llm_config(model(server, "slow"), model(server, "backup", weight=1e-9),
                            fallbacks=["openai/backup"], timeout_s=0.5)
        answer = LLMClient(config, store).ask("prompt", random.Random(0))
    assert answer.model == "openai/backup" and answer.text == "from the fallback"
    first, second = store.llm_calls()
    assert first["model"] == "openai/slow" and "Timeout" in first["error"] and second["error"] is None
    assert first["reason"] == "timeout"
    assert [r["model"] for r in server.requests] == ["slow", "backup"]


def test_models_are_drawn_by_weight(store):
    with FakeLLMServer(["x"] * 40) as server:
        client = LLMClient(llm_config(model(server, "heavy", weight=9.0), model(server, "light", weight=1.0)), store)
        rng = random.Random(1)
        models = [client.ask(f"prompt {i}", rng).model for i in range(40)]
    assert 25 <= models.count("openai/heavy") <= 40 and models.count("openai/light") >= 1


def test_budget_stops_new_calls_but_not_cached_answers(store):
    with FakeLLMServer(["expensive answer " * 50, "never sent"]) as server:
        config = llm_config(model(server, usd_per_mtok_in=1e6, usd_per_mtok_out=1e6))
        client = LLMClient(config, store, store.run_dir / "llm_cache", usd_budget=0.5)
        client.ask("prompt", random.Random(0))
        assert client.exhausted and store.total_cost() >= 0.5
        with pytest.raises(BudgetExhausted, match="budget spent"):
            client.ask("another prompt", random.Random(0))
        assert len(server.requests) == 1
    replay = LLMClient(config, store, store.run_dir / "llm_cache", usd_budget=0.5)
    assert replay.ask("prompt", random.Random(0)).cached  # a cached answer costs nothing


def test_replay_from_the_cache_needs_no_server(store, tmp_path):
    cache = store.run_dir / "llm_cache"
    with FakeLLMServer(["answer one", "answer two", "answer three"]) as server:
        config = llm_config(model(server))
        live = LLMClient(config, store, cache)
        asked = [live.ask(p, random.Random(0)).text for p in ("same", "other", "same")]
        api_base = server.api_base
    assert asked == ["answer one", "answer two", "answer three"]
    with Store(tmp_path / "replay", create=True) as replay_store:
        replay = LLMClient(llm_config({"model": "openai/fake", "api_base": api_base, "api_key_env": "EVK_FAKE_KEY"}),
                           replay_store, cache)
        again = [replay.ask(p, random.Random(0)) for p in ("same", "other", "same")]
        assert [a.text for a in again] == asked and all(a.cached for a in again)
        assert all(c["cached"] == 1 and c["cost_usd"] == 0 for c in replay_store.llm_calls())
        with pytest.raises(ProposalFailed, match="every model"):  # a fourth ask is not cached: the server is gone
            replay.ask("same", random.Random(0))


def test_cache_disabled_writes_nothing(store):
    with FakeLLMServer(["a"]) as server:
        LLMClient(llm_config(model(server), cache=False), store, store.run_dir / "llm_cache").ask("p", random.Random(0))
    assert not (store.run_dir / "llm_cache").exists()
