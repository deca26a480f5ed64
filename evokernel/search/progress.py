"""What a search reports while it runs and when it ends: `SearchStats` (the progress display, also
the end-of-run summary), `SearchResult` and `proposal_failure_kind` (the reasons of proposals that made
no kernel, counted by kind; rejections are counted by `evokernel.harness.rejection_kind`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from evokernel.store import Individual


@dataclass
class SearchStats:
    """What the progress display shows; also the end-of-run summary."""

    run_dir: Path
    evaluations: int = 0  # finished evaluations, including earlier sessions of a resumed run
    budget: int | None = None
    in_flight: int = 0
    queued: int = 0  # proposals stored and waiting for a free slot
    proposing: int = 0  # proposals being generated (LLM calls)
    slots: int = 0
    best_id: int | None = None
    best_fitness: float | None = None
    seed_id: int | None = None  # the fastest correct seed: the bar a search's kernel has to clear
    seed_fitness: float | None = None
    failures: Counter = field(default_factory=Counter)  # rejected evaluations by harness.rejection_kind
    duplicates: int = 0  # proposals identical to an earlier kernel: skipped, not evaluated
    proposal_failures: Counter = field(default_factory=Counter)  # by (operator, proposal_failure_kind)
    busy_fraction: float | None = None
    cost_usd: float = 0.0
    elapsed_s: float = 0.0  # including earlier sessions
    driver_seconds: float = 0.0  # time this session's driver spent outside waiting
    session_evaluations: int = 0
    screened: int = 0  # this session's evaluations timed alone against reused speed-reference times
    last: str | None = None  # the latest event, as one line
    llm: bool = False

    @property
    def overhead_per_evaluation_s(self) -> float | None:
        return self.driver_seconds / self.session_evaluations if self.session_evaluations else None


@dataclass
class SearchResult:
    stats: SearchStats
    status: str  # finished or stopped
    reason: str  # why it ended
    best: Individual | None


def proposal_failure_kind(operator: str, reason: str) -> str:
    """The kind of a failed proposal's reason, for counting: its first line without the operator's own name
    (and question id), details in parentheses, quoted names, paths and numbers, so that failures differing
    only in those count together."""
    text = (reason.strip().splitlines() or [""])[0]
    text = re.sub(rf"^{re.escape(operator)}(\s*\([^()]*\))?:\s*", "", text)  # "question-mutation (q-id): "
    text = re.sub(r"(?<!\w)'[^']*'(?!\w)|\"[^\"]*\"|`[^`]*`", "", text)  # quoted names (not "kernel #3's")
    while re.search(r"\([^()]*\)", text):  # innermost first, so nested ones go too
        text = re.sub(r"\s*\([^()]*\)", "", text)
    text = re.sub(r"/?\S*/\S*", lambda m: m[0] if re.fullmatch(r"[A-Za-z]+(/[A-Za-z]+)+", m[0]) else "",
                  text)  # paths (not words such as SEARCH/REPLACE)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return " ".join(text.split()).strip(" :;,.")[:100] or "unknown"
