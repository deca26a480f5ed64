"""LLM access through litellm: weighted models with fallbacks, retries on rate limits, a USD budget,
every call (tokens, cost, latency, error) recorded in the store, and an answer cache for replay.

The cache is keyed by the hash of the prompt and the number of times this run has asked that prompt
before, so replaying a run asks the same prompts in the same order and gets the same answers
without an API. litellm is imported on the first real call only (it takes seconds to import).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from evokernel.config import LLMConfig, ModelConfig
from evokernel.mutations import ProposalFailed
from evokernel.store import LLMCall


class BudgetExhausted(ProposalFailed):
    """The run's USD budget is spent: no new LLM proposals."""


@dataclass
class Answer:
    """What the LLM said, which model said it, and the `llm_calls` row that records it."""

    text: str
    model: str
    call_id: int | None
    cached: bool


def _litellm():
    """litellm, imported on first use (slow to import) and kept quiet."""
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def prompt_key(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


class LLMClient:
    """Ask prompts of the configured models. Thread-safe; one client per run.

    `store` is the run's store for the budget; a caller on another thread passes its own connection
    to `ask(store=...)` (an SQLite connection serves only the thread that made it).
    """

    RETRYABLE = ("RateLimitError", "InternalServerError", "ServiceUnavailableError", "APIConnectionError")

    def __init__(self, config: LLMConfig, store=None, cache_dir: Path | None = None,
                 usd_budget: float | None = None) -> None:
        if not config.models:
            raise ValueError("LLMClient needs at least one model in llm.models")
        self.config = config
        self.store = store
        self.cache_dir = Path(cache_dir) if cache_dir and config.cache else None
        self.usd_budget = usd_budget
        self._asked: Counter[str] = Counter()
        self._spent = 0.0
        self._lock = threading.Lock()

    # -- budget ---------------------------------------------------------------------------------
    def spent(self, store=None) -> float:
        """USD spent by this run so far (all recorded calls, including before a resume)."""
        store = store if store is not None else self.store
        return store.total_cost() if store is not None else self._spent

    def is_exhausted(self, store=None) -> bool:
        return self.usd_budget is not None and self.spent(store) >= self.usd_budget

    @property
    def exhausted(self) -> bool:
        """Whether the USD budget is spent (read through the client's own store: call from its thread)."""
        return self.is_exhausted()

    # -- cache ----------------------------------------------------------------------------------
    def _cache_path(self, key: str) -> Path:
        return self.cache_dir / f"{key}.json"

    def _cached(self, key: str, occurrence: int) -> dict | None:
        """The answer this prompt got the `occurrence`-th time it was asked (model, response, token counts)."""
        if self.cache_dir is None or not self._cache_path(key).exists():
            return None
        entries = json.loads(self._cache_path(key).read_text())
        return entries[occurrence] if occurrence < len(entries) else None

    def _remember(self, key: str, entry: dict) -> None:
        if self.cache_dir is None:
            return
        with self._lock:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            path = self._cache_path(key)
            entries = json.loads(path.read_text()) if path.exists() else []
            entries.append(entry)
            scratch = path.with_suffix(".tmp")
            scratch.write_text(json.dumps(entries, indent=1))
            scratch.replace(path)

    # -- recording ------------------------------------------------------------------------------
    def _record(self, call: LLMCall, store) -> int | None:
        with self._lock:
            self._spent += call.cost_usd
        return store.add_llm_call(call) if store is not None else None

    # -- models ---------------------------------------------------------------------------------
    def _order(self, rng: random.Random) -> list[ModelConfig]:
        """The model to try first (drawn by weight), then the fallbacks, each once."""
        models = self.config.models
        first = rng.choices(models, weights=[m.weight for m in models])[0]
        known = {m.model: m for m in models}
        order = [first] + [known.get(name, ModelConfig(model=name)) for name in self.config.fallbacks]
        seen: set[str] = set()
        return [m for m in order if not (m.model in seen or seen.add(m.model))]

    def _cost(self, model: ModelConfig, response, prompt_tokens: int, completion_tokens: int) -> float:
        if model.usd_per_mtok_in is not None or model.usd_per_mtok_out is not None:
            return ((model.usd_per_mtok_in or 0) * prompt_tokens + (model.usd_per_mtok_out or 0) * completion_tokens) / 1e6
        try:
            return float(_litellm().completion_cost(completion_response=response) or 0.0)
        except Exception:  # unknown model: litellm has no price for it
            return 0.0

    def _complete(self, model: ModelConfig, prompt: str):
        kwargs = {}
        if model.api_base:
            kwargs["api_base"] = model.api_base
        if model.api_key_env:
            kwargs["api_key"] = os.environ.get(model.api_key_env, "")
        return _litellm().completion(model=model.model, messages=[{"role": "user", "content": prompt}],
                                      temperature=self.config.temperature, max_tokens=self.config.max_tokens,
                                      timeout=self.config.timeout_s, max_retries=0, num_retries=0, **kwargs)

    # -- asking ---------------------------------------------------------------------------------
    def ask(self, prompt: str, rng: random.Random, operator: str | None = None, question_id: str | None = None,
            parent_ids: list[int] | None = None, store=None) -> Answer:
        """The answer to `prompt`: from the cache if this run asked it before, else from a model.

        Raises BudgetExhausted when the budget is spent, ProposalFailed when every model failed.
        """
        store = store if store is not None else self.store
        key = prompt_key(prompt)
        with self._lock:
            occurrence = self._asked[key]
            self._asked[key] += 1
        meta = {"operator": operator, "question_id": question_id, "parent_ids": list(parent_ids or [])}
        cached = self._cached(key, occurrence)
        if cached is not None:
            call_id = self._record(LLMCall(prompt=prompt, cached=True, latency_s=0.0, **cached, **meta), store)
            return Answer(cached["response"], cached["model"], call_id, True)
        if self.is_exhausted(store):
            raise BudgetExhausted(f"USD budget spent (${self.spent(store):.4f} of ${self.usd_budget:.4f})")
        last_error, last_id = "no model tried", None
        for model in self._order(rng):
            for attempt in range(self.config.max_retries + 1):
                started = time.monotonic()
                try:
                    response = self._complete(model, prompt)
                except Exception as exc:  # any provider error is recorded; only transient ones are retried
                    last_error = f"{type(exc).__name__}: {str(exc)[:500]}"
                    last_id = self._record(LLMCall(model=model.model, prompt=prompt, error=last_error,
                                                   latency_s=time.monotonic() - started, **meta), store)
                    if type(exc).__name__ not in self.RETRYABLE or attempt == self.config.max_retries:
                        break
                    time.sleep(self.config.retry_backoff_s * 2 ** attempt * (1 + 0.25 * rng.random()))
                    continue
                text = response.choices[0].message.content or ""
                usage = getattr(response, "usage", None)
                prompt_tokens = getattr(usage, "prompt_tokens", None) or 0
                completion_tokens = getattr(usage, "completion_tokens", None) or 0
                call_id = self._record(LLMCall(
                    model=model.model, prompt=prompt, response=text, prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens, latency_s=time.monotonic() - started,
                    cost_usd=self._cost(model, response, prompt_tokens, completion_tokens), **meta), store)
                self._remember(key, {"model": model.model, "response": text, "prompt_tokens": prompt_tokens,
                                     "completion_tokens": completion_tokens})
                return Answer(text, model.model, call_id, False)
        raise ProposalFailed(f"LLM call failed on every model ({last_error})", last_id)
