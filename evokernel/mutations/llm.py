"""LLM access through litellm: weighted models with fallbacks, retries of transient failures (litellm's
`num_retries` with a retry policy), a USD budget, every call (tokens, cost, latency, failure reason)
recorded in the store; answers taken first from the answer cache or a replayed run (`answer_cache`: then a
model on a miss, or, replaying, a failed call, never a network request).

litellm is imported on the first real call only (it takes seconds to import), with its cost map kept
local (LITELLM_LOCAL_MODEL_COST_MAP=True unless the user set it): no network at import, no warnings.

Two models are not litellm's: `cmd:COMMAND` runs a command on the prompt (`command_model`), and `files`
writes the prompt as a file and raises AnswerPending; the search takes the answer when a person or an agent
gives it (`record_answer` then records the call, its latency being the time the answer took).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from evokernel.config import LLMConfig, ModelConfig, RunConfig
from evokernel.errors import BadInput
from evokernel.mutations import AnswerPending, ProposalFailed
from evokernel.mutations.command_model import CommandFailed, check_command, is_command, run_command
from evokernel.mutations.answer_cache import AnswerCache, question_key
from evokernel.store import LLMCall, OpenPrompt
from evokernel.store import prompt_box

PLACEHOLDER_KEY = "no-key"  # sent to a local --api-base when the environment holds no key: such servers need none
NOT_REPLAYED = "not in the replayed run"
CHECK_PROMPT = "Reply with the word OK."
FILES_MODEL = "files"
CHARS_PER_TOKEN = 4  # a command's or a person's answer has no token count: sizes are estimated from characters


def is_files(model: str) -> bool:
    return model == FILES_MODEL


def estimated_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


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
    """litellm, imported on first use (slow to import), with its local cost map, and kept quiet."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def failure_reason(exc: BaseException) -> str:
    """Why a call failed, in a few words, from litellm's exception classes (and the cause they wrap)."""
    if isinstance(exc, CommandFailed):
        return exc.reason
    import litellm
    import openai

    if isinstance(exc, litellm.Timeout) or any(isinstance(e, openai.APITimeoutError) for e in _chain(exc)):
        return "timeout"
    if isinstance(exc, litellm.APIConnectionError) or any(isinstance(e, openai.APIConnectionError)
                                                          for e in _chain(exc)):
        return "connection failed"  # litellm reports a refused connection as an InternalServerError
    if "Missing credentials" in str(exc):
        return "no API key"
    for cls, reason in ((litellm.AuthenticationError, "authentication failed"),
                        (litellm.PermissionDeniedError, "permission denied"),
                        (litellm.NotFoundError, "model or endpoint not found"),
                        (litellm.RateLimitError, "rate limited"),
                        (litellm.ContextWindowExceededError, "context window exceeded"),
                        (litellm.ContentPolicyViolationError, "content policy"),
                        (litellm.BadRequestError, "bad request"),
                        (litellm.ServiceUnavailableError, "service unavailable"),
                        (litellm.InternalServerError, "server error"),
                        (litellm.APIError, "API error")):
        if isinstance(exc, cls):
            return reason
    return type(exc).__name__


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def model_price_known(model: ModelConfig) -> bool:
    """Whether a call's cost can be computed: prices in the config, or litellm's (local) cost map (a command or
    the files model costs its declared price, or nothing)."""
    if model.priced or is_command(model.model) or is_files(model.model):
        return True
    try:
        _litellm().cost_per_token(model=model.model, prompt_tokens=1, completion_tokens=1)
        return True
    except Exception:  # litellm: "This model isn't mapped yet"
        return False


def all_models(config: LLMConfig) -> list[ModelConfig]:
    """The configured models, then the fallbacks that have no entry of their own."""
    known = {m.model: m for m in config.models}
    return [*config.models, *(ModelConfig(model=n) for n in dict.fromkeys(config.fallbacks) if n not in known)]


def check_prices(config: RunConfig) -> None:
    """A USD budget needs a price for every model: BadInput naming the first model without one."""
    if config.budget.usd is None or config.llm.replay_from is not None:
        return
    for model in all_models(config.llm):
        if not model_price_known(model):
            raise BadInput(f"budget.usd is set but model {model.model} has no price (litellm's cost map does not "
                           "know it): add usd_per_mtok_in and usd_per_mtok_out to its entry in llm.models")


class LLMClient:
    """Ask prompts of the configured models. Thread-safe; one client per run.

    `store` is the run's store for the budget; a caller on another thread passes its own connection
    to `ask(store=...)` (an SQLite connection serves only the thread that made it).
    """

    def __init__(self, config: LLMConfig, store=None, cache_dir: Path | None = None,
                 usd_budget: float | None = None) -> None:
        if not config.models:
            raise ValueError("LLMClient needs at least one model in llm.models")
        self.config = config
        self.store = store
        self.usd_budget = usd_budget
        self.answers = AnswerCache(Path(cache_dir) if cache_dir and config.cache else None, config.replay_from)
        self._spent = 0.0
        self._lock = threading.Lock()
        self._posting = threading.Lock()  # a files prompt's checks (a waiting twin, the cap) and its posting: one step
        self._failed_in_row: Counter[str] = Counter()  # by model
        self._last_reason: dict[str, str] = {}
        self._key_in_env: dict[str, bool] = {}
        self.unavailable: str | None = None  # set when every model failed too often in a row: no more calls

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

    # -- recording ------------------------------------------------------------------------------
    def _record(self, call: LLMCall, store) -> int | None:
        with self._lock:
            self._spent += call.cost_usd
        return store.add_llm_call(call) if store is not None else None

    def _outcome(self, model: str, reason: str | None) -> None:
        """Count failures in a row per model; when every model has failed often enough, stop calling."""
        with self._lock:
            if reason is None:
                self._failed_in_row[model] = 0
                return
            self._failed_in_row[model] += 1
            self._last_reason[model] = reason
            limit = self.config.max_consecutive_failures
            names = [m.model for m in all_models(self.config)]
            if self.unavailable is None and all(self._failed_in_row[n] >= limit for n in names):
                why = ", ".join(f"{n}: {self._last_reason[n]}" for n in names)
                self.unavailable = f"the last {limit} LLM calls failed on every model ({why})"

    # -- models ---------------------------------------------------------------------------------
    def _order(self, rng: random.Random) -> list[ModelConfig]:
        """The model to try first (drawn by weight), then the fallbacks, each once."""
        models = self.config.models
        first = rng.choices(models, weights=[m.weight for m in models])[0]
        known = {m.model: m for m in models}
        order = [first] + [known.get(name, ModelConfig(model=name)) for name in self.config.fallbacks]
        seen: set[str] = set()
        return [m for m in order if not (m.model in seen or seen.add(m.model))]

    def _cost(self, model: ModelConfig, prompt_tokens: int, completion_tokens: int) -> float:
        if model.priced:
            return (model.usd_per_mtok_in * prompt_tokens + model.usd_per_mtok_out * completion_tokens) / 1e6
        if is_command(model.model) or is_files(model.model):
            return 0.0
        try:
            return float(sum(_litellm().cost_per_token(model=model.model, prompt_tokens=prompt_tokens,
                                                       completion_tokens=completion_tokens)))
        except Exception:  # unknown model: litellm has no price for it (a USD budget refuses it at start)
            return 0.0

    def api_key(self, model: ModelConfig) -> str | None:
        """The key to send: the named variable's; a placeholder for an --api-base when the environment has
        none (a local server needs none); else None, and litellm reads the provider's own variable."""
        if model.api_key_env and os.environ.get(model.api_key_env):
            return os.environ[model.api_key_env]
        if not model.api_base:
            return None
        if model.api_key_env is None:
            if model.model not in self._key_in_env:
                self._key_in_env[model.model] = bool(
                    _litellm().validate_environment(model=model.model).get("keys_in_environment"))
            if self._key_in_env[model.model]:
                return None
        return PLACEHOLDER_KEY

    def _complete(self, model: ModelConfig, prompt: str, max_tokens: int | None = None, retries: bool = True):
        litellm = _litellm()
        from litellm.types.router import RetryPolicy

        kwargs = {}
        if model.api_base:
            kwargs["api_base"] = model.api_base
        key = self.api_key(model)
        if key:
            kwargs["api_key"] = key
        # transient failures are retried by litellm; a wrong key, model or request fails at once, and a
        # timeout (already timeout_s long) goes to the next model
        n = self.config.max_retries if retries else 0
        policy = RetryPolicy(DefaultRetries=n, AuthenticationErrorRetries=0, NotFoundErrorRetries=0,
                             BadRequestErrorRetries=0, ContentPolicyViolationErrorRetries=0, TimeoutErrorRetries=0)
        strategy = "exponential_backoff_retry" if self.config.retry_backoff_s > 0 else "constant_retry"
        return litellm.completion(model=model.model, messages=[{"role": "user", "content": prompt}],
                                  temperature=self.config.temperature, max_tokens=max_tokens or self.config.max_tokens,
                                  timeout=self.config.timeout_s, num_retries=0, retry_policy=policy,
                                  retry_strategy=strategy, **kwargs)

    # -- the check at start -----------------------------------------------------------------------
    def check(self) -> None:
        """One cheap call per model: a wrong model name, key or endpoint becomes a one-line BadInput."""
        for model in all_models(self.config):
            if is_command(model.model):
                check_command(model.model)
                continue
            if is_files(model.model):
                continue
            try:
                self._complete(model, CHECK_PROMPT, max_tokens=5, retries=False)
            except Exception as exc:
                reason = failure_reason(exc)
                if reason == "rate limited":
                    continue  # the model, key and endpoint answered
                where = f" at {model.api_base}" if model.api_base else ""
                hint = ""
                if not model.api_base and self.api_key(model) is None:
                    missing = _litellm().validate_environment(model=model.model).get("missing_keys") or []
                    hint = f"; not set: {', '.join(missing)}" if missing else ""
                elif model.api_key_env and not os.environ.get(model.api_key_env):
                    hint = f"; {model.api_key_env} (api_key_env) is not set"
                raise BadInput(f"LLM check of model {model.model}{where} failed: {reason} "
                               f"({_one_line(str(exc))}){hint}; fix --model, the key or --api-base, "
                               "or skip this check with --no-llm-check") from None

    # -- the files model ------------------------------------------------------------------------
    @property
    def files_only(self) -> bool:
        """Whether every model is the files model (questions then wait for people or agents)."""
        return all(is_files(m.model) for m in all_models(self.config))

    def prompt_room(self, asking: int = 0, store=None) -> bool:
        """Whether another question may be asked now, with `asking` questions already being asked: False only
        when every model is `files` and the open prompts would reach `llm.max_open_prompts` (another model
        takes the question otherwise)."""
        if not self.files_only:
            return True
        store = store if store is not None else self.store
        return store.open_prompt_count() + asking < self.config.max_open_prompts

    def _post(self, prompt: str, key: str, trigger: str | None, meta: dict, store) -> AnswerPending:
        """Write the prompt for a person or an agent to answer (RUN/prompts/ID.md and the prompts table)."""
        now = time.time()
        row = OpenPrompt(id=prompt_box.new_prompt_id(now), operator=meta["operator"] or "-", prompt=prompt,
                         created_at=now, question_id=meta["question_id"], trigger=trigger,
                         parent_ids=meta["parent_ids"], question_key=key)
        store.add_prompt(row)
        prompt_box.write_prompt(store.run_dir, row)
        return AnswerPending(row.id)

    def record_answer(self, prompt: OpenPrompt, text: str, answered_by: str | None, store) -> int:
        """Record a files-model answer as the call it answers: latency = the time the answer took."""
        model = next((m for m in all_models(self.config) if is_files(m.model)), ModelConfig(model=FILES_MODEL))
        prompt_tokens, completion_tokens = estimated_tokens(prompt.prompt), estimated_tokens(text)
        return self._record(LLMCall(
            model=FILES_MODEL + (f" ({answered_by})" if answered_by else ""), prompt=prompt.prompt, response=text,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            latency_s=time.time() - prompt.created_at, cost_usd=self._cost(model, prompt_tokens, completion_tokens),
            question_key=prompt.question_key, operator=prompt.operator, question_id=prompt.question_id,
            parent_ids=prompt.parent_ids), store)

    # -- asking ---------------------------------------------------------------------------------
    def _call(self, model: ModelConfig, prompt: str) -> tuple[str, int, int]:
        """A model's answer and its prompt and completion tokens (estimated for a command)."""
        if is_command(model.model):
            text = run_command(model.model, prompt, self.config.timeout_s).text
            return text, estimated_tokens(prompt), estimated_tokens(text)
        response = self._complete(model, prompt)
        usage = getattr(response, "usage", None)
        return (response.choices[0].message.content or "", getattr(usage, "prompt_tokens", None) or 0,
                getattr(usage, "completion_tokens", None) or 0)

    def ask(self, prompt: str, rng: random.Random, operator: str | None = None, question_id: str | None = None,
            parent_ids: list[int] | None = None, store=None, parent_hashes: list[str] | None = None,
            trigger: str | None = None) -> Answer:
        """The answer to the question: from the cache (or the replayed run) if recorded there, else from a model.

        Raises BudgetExhausted when the budget is spent, ProposalFailed when every model failed, when the
        client has given up after too many failures in a row, or when a replayed run has no answer, and
        AnswerPending when the question went to the files model (its answer comes later).
        """
        store = store if store is not None else self.store
        meta = {"operator": operator, "question_id": question_id, "parent_ids": list(parent_ids or [])}
        order = self._order(rng)
        keys = {m.model: question_key(m.model, operator, question_id, parent_hashes or [], prompt) for m in order}
        candidates = [m.model for m in order] + ([m.model for m in self.config.models if m.model not in keys]
                                                 if self.answers.replaying else [])
        for name in candidates:
            key = keys.get(name) or question_key(name, operator, question_id, parent_hashes or [], prompt)
            cached = self.answers.take(key)
            if cached is not None:
                call_id = self._record(LLMCall(prompt=prompt, cached=True, latency_s=0.0, question_key=key,
                                               **cached, **meta), store)
                return Answer(cached["response"], cached["model"], call_id, True)
        if self.answers.replaying:
            error = f"{NOT_REPLAYED}: {self.config.replay_from} holds no further answer to this question"
            call_id = self._record(LLMCall(model=order[0].model, prompt=prompt, error=error, reason=NOT_REPLAYED,
                                           question_key=keys[order[0].model], **meta), store)
            raise ProposalFailed(error, call_id)
        if self.unavailable is not None:
            raise ProposalFailed(self.unavailable)
        if self.is_exhausted(store):
            raise BudgetExhausted(f"USD budget spent (${self.spent(store):.4f} of ${self.usd_budget:.4f})")
        last_error, last_id = "no model tried", None
        for model in order:
            key = keys[model.model]
            if is_files(model.model):
                with self._posting:  # proposals made at once on threads would both see no twin and both post
                    waiting = store.open_prompt_for(key)
                    if waiting:  # the same question about the same parents: one answerer's work, not two
                        last_error = ("files: the same question about the same kernels waits for its answer "
                                      f"(prompt {waiting})")
                        if self.files_only:  # no other model could take it: say so as the failure's own kind
                            raise ProposalFailed(last_error)
                    elif store.open_prompt_count() < self.config.max_open_prompts:
                        raise self._post(prompt, key, trigger, meta, store)
                    else:
                        last_error = f"files: {self.config.max_open_prompts} prompts already wait for answers"
                continue
            started = time.monotonic()
            try:
                text, prompt_tokens, completion_tokens = self._call(model, prompt)
            except Exception as exc:  # any provider error is recorded; litellm already retried the transient ones
                reason = failure_reason(exc)
                error = f"{type(exc).__name__}: {str(exc)[:500]}"
                last_error = f"{reason}: {error}"
                last_id = self._record(LLMCall(model=model.model, prompt=prompt, error=error, reason=reason,
                                               latency_s=time.monotonic() - started, question_key=key, **meta),
                                       store)
                self._outcome(model.model, reason)
                continue
            call_id = self._record(LLMCall(
                model=model.model, prompt=prompt, response=text, prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens, latency_s=time.monotonic() - started,
                cost_usd=self._cost(model, prompt_tokens, completion_tokens), question_key=key, **meta), store)
            self._outcome(model.model, None)
            self.answers.remember(key, {"model": model.model, "response": text, "prompt_tokens": prompt_tokens,
                                 "completion_tokens": completion_tokens})
            return Answer(text, model.model, call_id, False)
        raise ProposalFailed(f"LLM call failed on every model ({last_error})", last_id)
