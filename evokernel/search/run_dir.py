"""A run's directory as the search keeps it: its name, the config and the seeds written before anything
is evaluated (so that even a driver killed in its first seconds leaves a run `--resume` finishes), the
meta of each session (versions, git revision, status) and the counters a resume carries on."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import yaml

from evokernel.config import RunConfig
from evokernel.errors import BadInput, read_text
from evokernel.harness import Task, isolation
from evokernel.lineage.statistics import proposal_failure_counts
from evokernel.mutations import Proposal
from evokernel.source import KnobError, knob_values, parse_knobs
from evokernel.search.progress import SearchStats
from evokernel.store import DB_NAME, Individual, RunLock, Store
from evokernel.source import normalized_hash, source_hash


def new_run_dir(runs_dir: Path) -> Path:
    """A fresh `runs/<UTC timestamp>` directory name (suffixed when two runs start in one second)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = runs_dir / stamp, 1
    while path.exists():
        path, n = runs_dir / f"{stamp}-{n}", n + 1
    return path


def write_config(run_dir: Path, config: RunConfig) -> dict:
    """`RUN/config.yaml`, what a resume reads; returns it as a mapping."""
    config_dict = config.model_dump(mode="json", by_alias=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config_dict, sort_keys=False))
    return config_dict


def seed_sources(config: RunConfig, task: Task) -> list[tuple[str, str]]:
    """(path, source) of the configured seeds (default: the task's original; none for a task without one, whose
    first kernel the search writes); a bad knob is BadInput."""
    seeds = []
    for path in config.seeds or ([task.original] if task.has_original else []):
        source = read_text(Path(path), "seed")
        try:
            parse_knobs(source)
        except KnobError as exc:
            raise BadInput(f"seed {path}: {exc}") from None
        seeds.append((str(path), source))
    return seeds


def individual_row(proposal: Proposal, generation: int, language: str) -> Individual:
    """The store's row of a proposed kernel, pending evaluation."""
    knobs = proposal.knobs or knob_values(proposal.source)
    return Individual(operator=proposal.operator, source_hash=source_hash(proposal.source),
                      normalized_hash=normalized_hash(proposal.source), language=language,
                      parent_ids=proposal.parent_ids, generation=generation, question_id=proposal.question_id,
                      trigger=proposal.trigger, model=proposal.model, llm_call_id=proposal.llm_call_id, knobs=knobs)


def store_seeds(store: Store, seeds: list[tuple[str, str]], language: str, notify: Callable[[str], None]) -> None:
    """The seeds, stored as pending before anything is evaluated (a resume evaluates those that were not);
    one identical to an earlier seed is skipped."""
    known = {row.normalized_hash for row in store.individuals()}
    with store.transaction():  # all seeds or none
        for path, source in seeds:
            digest = normalized_hash(source)
            if digest in known:
                notify(f"seed {path} is identical to an earlier seed: skipped")
                continue
            known.add(digest)
            store.add_individual(individual_row(Proposal(source=source, operator="seed", parent_ids=[]), 0, language),
                                 source)


def open_run(run_dir: Path, config: RunConfig, task: Task, seeds: list[tuple[str, str]], resume: bool,
             stats: SearchStats, notify: Callable[[str], None], notes: list[str]) -> tuple[RunLock, Store, Session]:
    """Everything a resume needs (directory, config, database, seeds) written before the evaluator (Ray)
    starts, under a lock that keeps a second driver out of this run; `notes` are said once it is open (a
    refused run says only why). A resumed run killed before it stored its seeds gets them now."""
    lock = RunLock(run_dir)
    store = None
    try:
        if not resume:
            write_config(run_dir, config)
        store = Store(run_dir, create=not resume or not (run_dir / DB_NAME).exists())
        for line in notes:
            notify(line)
        session = open_session(store, run_dir, config, resume, stats)
        if resume and not any(row.operator == "seed" for row in store.individuals()):
            seeds = seed_sources(config, task)
        store_seeds(store, seeds, task.language, notify)
        return lock, store, session
    except BaseException:
        release_run(lock, store)
        raise


def release_run(lock: RunLock, store: Store | None) -> None:
    """Close the store and let another driver in (after a failed start; a session's end is `close_session`)."""
    if store is not None:
        store.close()
    lock.release()


@dataclass
class Session:
    """This driver's session of a run, and what the earlier sessions left."""

    index: int  # 0 for a new run
    started: float
    earlier_elapsed: float

    def elapsed(self) -> float:
        return self.earlier_elapsed + time.time() - self.started


def open_session(store: Store, run_dir: Path, config: RunConfig, resume: bool, stats: SearchStats) -> Session:
    """Record this session in the run's meta (config, versions, isolation, status running); `stats` takes
    the counters of earlier sessions."""
    meta = store.meta()
    if resume and "config" not in meta and store.count():  # (none yet: killed as it started)
        raise BadInput(f"{run_dir} is not a run directory written by `evokernel run` (no config in meta)")
    now = time.time()
    counters = meta.get("counters", {})
    stats.duplicates = counters.get("duplicates", 0)
    stats.proposal_failures = proposal_failure_counts(store)
    store.set_meta("config", write_config(run_dir, config))
    store.set_meta("random_seed", config.random_seed)
    store.set_meta("versions", _versions())
    store.set_meta("isolation", isolation().describe())  # each evaluation's report says its own too
    if "git_revision" not in meta:
        store.set_meta("git_revision", _git_revision())
        store.set_meta("started_at", now)
    store.set_meta("sessions", [*meta.get("sessions", []), {"started_at": now, "resumed": resume}])
    store.set_meta("status", "running")
    return Session(len(meta.get("sessions", [])), now, float(meta.get("elapsed_s", 0.0)))


def save_counters(store: Store, session: Session, stats: SearchStats) -> None:
    """What a resume carries on: duplicates, time spent, and failed proposals by operator (their reasons are in
    the database; these totals also count those of a run recorded before it kept them)."""
    by_operator = Counter()
    for (operator, _), n in stats.proposal_failures.items():
        by_operator[operator] += n
    store.set_meta("counters", {"duplicates": stats.duplicates, "proposal_failures": dict(by_operator)})
    store.set_meta("elapsed_s", session.elapsed())


def close_session(store: Store, session: Session, stats: SearchStats, status: str, stop_reason: str | None,
                  logbook: list) -> None:
    """The session's end in the meta, then the store closed."""
    save_counters(store, session, stats)
    sessions = store.meta().get("sessions", [])
    if sessions:
        sessions[-1]["stopped_at"] = time.time()
    store.set_meta("sessions", sessions)
    store.set_meta("stopped_at", time.time())
    store.set_meta("status", status)
    store.set_meta("stop_reason", stop_reason)
    store.set_meta("logbook", logbook)
    store.close()


def _versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for package in ("evokernel", "ray", "deap", "torch", "litellm"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None
