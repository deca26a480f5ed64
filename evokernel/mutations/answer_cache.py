"""Answers kept by question, so that asking again costs nothing: a run's cache directory, or the answers a
replayed run recorded (`evokernel run --replay`, never a network request).

Answers are keyed on what defines the question, not on the prompt text (which holds measured times): the
model, the operator, the question id, the hashes of the parents' sources and the prompt template version
(`question_key`). The n-th time a run asks a question it takes the n-th answer recorded for that key.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.mutations.prompts import PROMPT_VERSION
from evokernel.store import Store


def prompt_key(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


def question_key(model: str, operator: str | None, question_id: str | None, parent_hashes: list[str],
                 prompt: str) -> str:
    """What defines a question, hashed: model, operator, question id, parents' sources, prompt version.

    A call that is not a question from the bank (no question id) is keyed on its prompt as well.
    """
    fields = {"model": model, "operator": operator, "question": question_id, "parents": list(parent_hashes),
              "prompt_version": PROMPT_VERSION}
    if question_id is None:
        fields["prompt"] = prompt_key(prompt)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


def replay_answers(run_dir: Path) -> dict[str, list[dict]]:
    """The answers recorded in a run, by question key, in the order they were given (BadInput if none)."""
    run_dir = Path(run_dir)
    if not (run_dir / "lineage.db").is_file():
        raise BadInput(f"--replay {run_dir}: not a run directory (no lineage.db)")
    with Store(run_dir, readonly=True) as store:
        calls = store.llm_calls()
    answers: dict[str, list[dict]] = {}
    for call in calls:
        if call.get("question_key") and call["response"] is not None and call["error"] is None:
            answers.setdefault(call["question_key"], []).append(
                {"model": call["model"], "response": call["response"], "prompt_tokens": call["prompt_tokens"],
                 "completion_tokens": call["completion_tokens"]})
    if not answers:
        raise BadInput(f"--replay {run_dir}: the run recorded no LLM answers with a question key to replay")
    return answers


class AnswerCache:
    """The answers one client may take: from `cache_dir` (None: no cache), or only from the run `replay_from`."""

    def __init__(self, cache_dir: Path | None, replay_from: Path | None = None) -> None:
        self.cache_dir = cache_dir
        self.replayed = replay_answers(replay_from) if replay_from is not None else None
        self._used: Counter[str] = Counter()  # answers taken this session, by question key
        self._lock = threading.Lock()

    @property
    def replaying(self) -> bool:
        """Answers come from a replayed run only (a miss is a failure, never a model call)."""
        return self.replayed is not None

    def take(self, key: str) -> dict | None:
        """The next answer recorded for this question (model, response, token counts), if there is one."""
        with self._lock:
            entry = self._recorded(key, self._used[key])
            if entry is not None:
                self._used[key] += 1
            return entry

    def remember(self, key: str, entry: dict) -> None:
        """A model's new answer to this question, for the next session or run that asks it."""
        with self._lock:
            self._used[key] += 1
            if self.cache_dir is None:
                return
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            path = self._path(key)
            entries = json.loads(path.read_text()) if path.exists() else []
            entries.append(entry)
            scratch = path.with_suffix(".tmp")
            scratch.write_text(json.dumps(entries, indent=1))
            scratch.replace(path)

    def _path(self, key: str) -> Path:
        return self.cache_dir / f"{key}.json"

    def _recorded(self, key: str, occurrence: int) -> dict | None:
        if self.replayed is not None:
            entries = self.replayed.get(key, [])
            return entries[occurrence] if occurrence < len(entries) else None
        if self.cache_dir is None or not self._path(key).exists():
            return None
        entries = json.loads(self._path(key).read_text())
        return entries[occurrence] if occurrence < len(entries) else None
