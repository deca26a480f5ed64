"""The search (`evokernel run`): a steady-state evolutionary loop over kernels.

The driver keeps every evaluation slot busy: when one evaluation finishes it records the result,
updates the population and immediately submits the next proposal, which was prepared while the
slot was busy (LLM proposals run concurrently in a thread pool, knob proposals inline). Every
individual is written to the lineage store when proposed (pending), marked running when submitted
and finished when its result arrives, so a killed run resumes without losing or repeating an
evaluation: `Search(config, run_dir, resume=True)` re-submits what was pending or running.

Interface: `Search`, `SearchStats`, `SearchResult`, `new_run_dir`, `failure_kind`.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import yaml
from deap import base

from evokernel.bank import TriggerMonitor, needs_recheck, recheck_options
from evokernel.config import RunConfig
from evokernel.errors import BadInput, read_text
from evokernel.harness import CheckOptions, Task, get_task, isolation
from evokernel.harness.remote import EvaluationPool, connect, evaluation_slots
from evokernel.mutations import Context, Operator, Parent, Proposal, ProposalFailed, operators
from evokernel.mutations.knobs import KnobError, knob_values, parse_knobs
from evokernel.population import Kernel, Population, make_kernel
from evokernel.store import DB_NAME, Individual, RunLock, Store, normalized_hash, source_hash

LLM_OPERATORS = ("question-mutation", "question-crossover", "repair")
UNPRODUCTIVE_LIMIT = 200  # proposals in a row that were duplicates or failed: the space is exhausted
PROGRESS_INTERVAL_S = 1.0
LINEAGE_DEPTH = 4  # ancestors summarised for an operator
RETIME_ROUND_FACTOR = 3  # the best kernel is re-timed against the seed with this many times the usual rounds
RETIME_KEY = "best_recheck"  # meta entry of that re-timing (see lineage.retime_record)


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
    seed_id: int | None = None
    seed_fitness: float | None = None
    failures: Counter = field(default_factory=Counter)  # rejected evaluations by kind of reason
    duplicates: int = 0  # proposals identical to an earlier kernel: skipped, not evaluated
    proposal_failures: Counter = field(default_factory=Counter)  # by operator
    busy_fraction: float | None = None
    cost_usd: float = 0.0
    elapsed_s: float = 0.0  # including earlier sessions
    driver_seconds: float = 0.0  # time this session's driver spent outside waiting
    session_evaluations: int = 0
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


def failure_kind(reason: str | None) -> str:
    """The kind of a rejection reason, for counting (drops scenario names, numbers and details)."""
    text = re.sub(r"^[\w.]+(-[\w.]+)+: ", "", reason or "unknown")
    text = re.split(r":| during | after |\d", text, maxsplit=1)[0]
    return text.strip() or "unknown"


def new_run_dir(runs_dir: Path) -> Path:
    """A fresh `runs/<UTC timestamp>` directory name (suffixed when two runs start in one second)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = runs_dir / stamp, 1
    while path.exists():
        path, n = runs_dir / f"{stamp}-{n}", n + 1
    return path


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


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def _signals_deferred(main_thread: bool = True):
    """Ctrl-C and SIGTERM are noted, not raised, inside (the store's closing writes are not cut short)."""
    if not main_thread:
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class _Job:
    """A proposal to make: which operator, from which parents, for which island."""

    operator: str
    parents: list[Parent]
    island: int | None
    generation: int
    trigger: str = "default"


@dataclass
class _Queued:
    id: int
    source: str
    island: int | None
    recheck: bool = False  # a second, stricter check of a suspicious gain


class Search:
    """One run of the evolutionary search; `run()` drives it to its budget and returns the result."""

    def __init__(self, config: RunConfig, run_dir: Path, resume: bool = False,
                 operator_set: dict[str, tuple[Operator, float]] | None = None,
                 progress: Callable[[SearchStats], None] | None = None,
                 notify: Callable[[str], None] | None = None, retime_best: bool = True) -> None:
        """`operator_set` replaces the registered operators (name -> (operator, weight)), for benchmarks;
        `retime_best=False` skips the end-of-run re-timing of the best kernel against the seed."""
        self.config = config
        self.retime_best = retime_best
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.task: Task = get_task(config.task)
        self.progress = progress or (lambda stats: None)
        notes: list[str] = []
        self.notify = notes.append  # said once the run is open: a refused run says only why
        self.seeds = [] if resume else self._seed_sources()  # bad input is found before anything is written
        self.toolbox = base.Toolbox()
        self.ops: dict[str, Operator] = {}
        self.weights: dict[str, float] = {}
        self._setup_operators(operator_set)
        llm = any(op.uses_llm for op in self.ops.values())
        if llm and config.llm.models:
            from evokernel.bank import load_bank

            load_bank(config.bank.dirs, builtin=config.bank.builtin)  # a bad question file: before anything is written
        # Everything a resume needs (directory, config, database, seeds) is written before Ray starts, under
        # a lock that keeps a second driver out of this run.
        self.lock = RunLock(self.run_dir)
        try:
            if not resume:
                self._write_config()
            self.store = Store(self.run_dir, create=not resume or not (self.run_dir / DB_NAME).exists())
            self.notify = notify or (lambda line: None)
            for line in notes:
                self.notify(line)
            self.stats = SearchStats(self.run_dir, budget=config.budget.evaluations, llm=llm)
            self._setup_meta()
            self._store_seeds()
            self.services = self._services()
        except BaseException:
            if hasattr(self, "store"):
                self.store.close()
            self.lock.release()
            raise
        self.rng = random.Random(f"{config.random_seed}:{self.session}")
        random.seed(f"{config.random_seed}:{self.session}:deap")  # DEAP's selection draws from `random`
        self.population = Population(
            config.population_size, config.selection.islands, config.selection.tournament_size,
            config.selection.elitism, config.selection.migration_interval, config.selection.migrants, self.rng)
        self.known: set[str] = set()  # normalized hashes of every kernel in the store
        self.queue: deque[_Queued] = deque()
        self.islands: dict[int, int | None] = {}
        self.repairs: deque[Individual] = deque()  # rejected LLM children (the repair operator bounds attempts)
        self.proposals: dict[int, Proposal] = {}  # this session's proposals by individual id (for triggers)
        self.rechecked: set[int] = set()
        self.monitor = TriggerMonitor(config.triggers, self.store)
        self.check_options = CheckOptions(scenario_set=config.scenarios, speed_reference=config.speed_reference,
                                          trials=config.trials, timeout_s=config.resources.evaluation_timeout_s,
                                          warm_worker=True)  # each evaluation slot keeps its next worker started
        self.proposing: dict[Future, _Job] = {}
        self.pool: EvaluationPool | None = None  # started by run(), once Ray is up
        # SIGTERM while Ray's core worker was connecting: its signal handler can abort the process at exit,
        # so a command should end with os._exit once its output is out
        self.sigterm_in_ray_start = False
        self.proposal_done = threading.Event()
        self.unproductive = 0
        self.stop_reason: str | None = None  # why no more proposals are made
        self.halted = False  # time or money is spent, or interrupted: queued kernels wait for a resume
        self._local = threading.local()
        self.llm_stopped: str | None = None  # why the question operators stopped, once the LLM client gave up

    # -- set-up -----------------------------------------------------------------------------------
    def _write_config(self) -> dict:
        config_dict = self.config.model_dump(mode="json", by_alias=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(config_dict, sort_keys=False))
        return config_dict

    def _setup_meta(self) -> None:
        meta = self.store.meta()
        if self.resume and "config" not in meta and self.store.count():  # (none yet: killed as it started)
            raise BadInput(f"{self.run_dir} is not a run directory written by `evokernel run` (no config in meta)")
        self.session = len(meta.get("sessions", []))
        now = time.time()
        self.started = now
        self.earlier_elapsed = float(meta.get("elapsed_s", 0.0))
        counters = meta.get("counters", {})
        self.stats.duplicates = counters.get("duplicates", 0)
        self.stats.proposal_failures = Counter(counters.get("proposal_failures", {}))
        config_dict = self._write_config()
        self.store.set_meta("config", config_dict)
        self.store.set_meta("random_seed", self.config.random_seed)
        self.store.set_meta("versions", _versions())
        self.store.set_meta("isolation", isolation().describe())  # each evaluation's report says its own too
        if "git_revision" not in meta:
            self.store.set_meta("git_revision", _git_revision())
            self.store.set_meta("started_at", now)
        self.store.set_meta("sessions", [*meta.get("sessions", []), {"started_at": now, "resumed": self.resume}])
        self.store.set_meta("status", "running")

    def _setup_operators(self, operator_set: dict[str, tuple[Operator, float]] | None) -> None:
        if operator_set is None:
            weights = self.config.operators.as_dict()
            factories = operators()
            llm = bool(self.config.llm.models)
            if not llm:
                self.notify("no LLM model is configured (llm.models / --model): using the knob operators only")
            operator_set = {}
            for name, weight in weights.items():
                if weight <= 0 or name not in factories or (name in LLM_OPERATORS and not llm):
                    continue
                operator_set[name] = (factories[name](self.config), weight)
            missing = [n for n in LLM_OPERATORS if llm and weights.get(n, 0) > 0 and n not in factories]
            if missing:
                self.notify(f"operators not available in this installation: {', '.join(missing)}")
        for name, (op, weight) in operator_set.items():
            self.toolbox.register(name, op)
            self.ops[name], self.weights[name] = op, weight
        if not self.ops:
            raise BadInput("field 'operators': no usable operator has a positive weight")

    def _services(self) -> dict[str, Any]:
        """Shared clients of the LLM operators (LLM client, bank, policy), when a model is configured."""
        if not (self.stats.llm and self.config.llm.models):
            return {}
        from evokernel.mutations.questions import build_services

        return build_services(self.config, self.store)

    def _seed_sources(self) -> list[tuple[str, str]]:
        paths = self.config.seeds or [self.task.original]
        seeds = []
        for path in paths:
            source = read_text(Path(path), "seed")
            try:
                parse_knobs(source)
            except KnobError as exc:
                raise BadInput(f"seed {path}: {exc}") from None
            seeds.append((str(path), source))
        return seeds

    def _restore(self) -> None:
        """Load the store: known kernels, the population of correct ones, what is left to evaluate."""
        earlier = self.store.individuals()
        for row in earlier:
            self.known.add(row.normalized_hash)
            if row.status == "correct":
                self._join(row, self.store.source(row), None)
            elif row.status in ("pending", "running"):
                self.store.update_individual(row.id, status="pending", started_at=None)
                self.queue.append(_Queued(row.id, self.store.source(row), None))
            elif row.status == "rejected":
                self.stats.failures[failure_kind(row.failure)] += 1
            if row.operator == "seed" and row.status == "correct" and self.stats.seed_id is None:
                self.stats.seed_id, self.stats.seed_fitness = row.id, row.fitness
        self.stats.evaluations = sum(1 for row in earlier if row.status in ("correct", "rejected"))
        if self.resume:
            self.notify(f"resuming {self.run_dir}: {self.stats.evaluations} evaluations done, "
                        f"{len(self.queue)} re-submitted, population {len(self.population)}")

    def _store_seeds(self) -> None:
        """The seeds, stored as pending before anything is evaluated (a resume evaluates those that were not);
        a resumed run that was killed before it stored them gets them now."""
        if self.resume:
            if self.store.db.execute("SELECT 1 FROM individuals WHERE operator = 'seed' LIMIT 1").fetchone():
                return
            self.seeds = self._seed_sources()
        known = {row.normalized_hash for row in self.store.individuals()}
        with self.store.transaction():  # all seeds or none
            for path, source in self.seeds:
                digest = normalized_hash(source)
                if digest in known:
                    self.notify(f"seed {path} is identical to an earlier seed: skipped")
                    continue
                known.add(digest)
                self.store.add_individual(self._row(Proposal(source=source, operator="seed", parent_ids=[]), 0),
                                          source)

    # -- proposals --------------------------------------------------------------------------------
    def _parent(self, kernel: Kernel | Individual, source: str | None = None) -> Parent:
        fitness = kernel.fitness if isinstance(kernel, Individual) else kernel.fitness.values[1]
        report = kernel.report
        return Parent(id=kernel.id, source=source if source is not None else kernel.source, fitness=fitness,
                      knobs=dict(kernel.knobs), report=report, lineage=self._lineage(kernel.id))

    def _lineage(self, kernel_id: int) -> str:
        """Earlier steps on the first-parent line: operator, question and what came of them."""
        lines, current = [], self.store.individual(kernel_id)
        for _ in range(LINEAGE_DEPTH):
            if not current.parent_ids:
                break
            parent = self.store.individual(current.parent_ids[0])
            question = f" question {current.question_id}" if current.question_id else ""
            outcome = (f"{parent.fitness:.3f} -> {current.fitness:.3f}" if current.fitness and parent.fitness
                       else current.failure or current.status)
            lines.append(f"#{current.id} from #{parent.id} by {current.operator}{question}: {outcome}")
            current = parent
        return "\n".join(reversed(lines))

    def _next_job(self, llm_room: bool) -> _Job | None:
        if "repair" in self.ops and self.repairs and llm_room:
            failing = self.repairs.popleft()
            parent = self._parent(failing, self.store.source(failing))
            return _Job("repair", [parent], self.islands.get(failing.id), failing.generation + 1, "repair")
        if not len(self.population):
            return None
        names = [n for n in self.ops if n != "repair" and (llm_room or not self.ops[n].uses_llm)
                 and self.ops[n].arity <= len(self.population)]  # no crossover of a kernel with itself
        if not names:
            return None
        name = self.rng.choices(names, weights=[self.weights[n] for n in names])[0]
        island, parents = self.population.select(self.ops[name].arity)
        trigger = self.monitor.active() if self.ops[name].uses_llm else "default"
        return _Job(name, [self._parent(p) for p in parents], island, 1 + max(p.generation for p in parents),
                    trigger)

    def _context(self, seed: float, trigger: str) -> Context:
        """A context for the calling thread (each proposal thread has its own store connection)."""
        if threading.current_thread() is threading.main_thread():
            store = self.store
        else:
            if not hasattr(self._local, "store"):
                self._local.store = Store(self.run_dir)
            store = self._local.store
        return Context(rng=random.Random(seed), task_name=self.task.name, language=self.task.language,
                       trigger=trigger, store=store, services=self.services)

    def _call(self, job: _Job, seed: float) -> Proposal:
        return getattr(self.toolbox, job.operator)(job.parents, self._context(seed, job.trigger))

    def _room(self) -> bool:
        """Whether another proposal may start: within budget and lookahead."""
        pending = self.pool.in_flight() + len(self.queue) + len(self.proposing)
        budget = self.config.budget.evaluations
        if budget is not None and self.stats.evaluations + pending >= budget:
            return False
        return len(self.queue) + len(self.proposing) < self.lookahead

    def _llm_stopped(self) -> bool:
        """Whether the LLM client gave up (every model failed too often in a row); said once, in one line."""
        client = self.services.get("llm")
        if client is None or client.unavailable is None:
            return False
        if self.llm_stopped is None:
            knobs = any(not op.uses_llm for op in self.ops.values())
            self.llm_stopped = (f"question operators stopped: {client.unavailable}; "
                                + ("the run goes on with the knob operators" if knobs else "no other operator"))
            self.notify(self.llm_stopped)
            self.stats.last = self.llm_stopped
            self.store.set_meta("llm_stopped", self.llm_stopped)
            if not knobs:
                self.stop_reason = self.stop_reason or self.llm_stopped
        return True

    def _start_proposals(self, executor: ThreadPoolExecutor) -> None:
        while self.stop_reason is None and self._room():
            if self.unproductive >= UNPRODUCTIVE_LIMIT:
                self.stop_reason = (f"no new kernels: the last {self.unproductive} proposals were duplicates "
                                    "or failed")
                return
            llm_room = sum(1 for job in self.proposing.values() if self.ops[job.operator].uses_llm) \
                < self.config.llm.max_concurrent and not self._llm_stopped()
            job = self._next_job(llm_room)
            if job is None:
                return
            seed = self.rng.random()
            if self.ops[job.operator].uses_llm:
                future = executor.submit(self._call, job, seed)
                self.proposing[future] = job
                future.add_done_callback(lambda _: self.proposal_done.set())
            else:
                try:
                    outcome = self._call(job, seed)
                except ProposalFailed as exc:
                    outcome = exc
                self._take(job, outcome)

    def _drain_proposals(self) -> None:
        self.proposal_done.clear()
        for future in [f for f in self.proposing if f.done()]:
            job = self.proposing.pop(future)
            try:
                outcome = future.result()
            except ProposalFailed as exc:
                outcome = exc
            except Exception as exc:  # an operator bug must not end the run; it is counted and shown
                outcome = ProposalFailed(f"{type(exc).__name__}: {exc}")
            self._take(job, outcome)

    def _take(self, job: _Job, outcome: Proposal | ProposalFailed) -> None:
        if isinstance(outcome, ProposalFailed):
            self.unproductive += 1
            self.stats.proposal_failures[job.operator] += 1
            self.stats.last = f"{job.operator} from {[p.id for p in job.parents]} failed: {outcome}"
            return
        if normalized_hash(outcome.source) in self.known:
            self.unproductive += 1
            self.stats.duplicates += 1
            if outcome.declared_limit:
                self.monitor.declared_limit(outcome)
            return
        self.unproductive = 0
        self.proposals[self._store_child(outcome, job.island, job.generation)] = outcome

    def _row(self, proposal: Proposal, generation: int) -> Individual:
        knobs = proposal.knobs or knob_values(proposal.source)
        return Individual(operator=proposal.operator, source_hash=source_hash(proposal.source),
                          normalized_hash=normalized_hash(proposal.source), language=self.task.language,
                          parent_ids=proposal.parent_ids, generation=generation, question_id=proposal.question_id,
                          trigger=proposal.trigger, model=proposal.model, llm_call_id=proposal.llm_call_id,
                          knobs=knobs)

    def _store_child(self, proposal: Proposal, island: int | None, generation: int) -> int:
        row = self._row(proposal, generation)
        child_id = self.store.add_individual(row, proposal.source)
        self.known.add(row.normalized_hash)
        self.islands[child_id] = island
        self.queue.append(_Queued(child_id, proposal.source, island))
        if self.queue[0].id != child_id or not self.pool.free_slots():
            self.pool.prebuild(proposal.source)  # it will wait for a slot: compile it meanwhile
        return child_id

    # -- evaluation -------------------------------------------------------------------------------
    def _submit_ready(self) -> None:
        while self.queue and self.pool.free_slots() and not self._over_time_or_money():
            item = self.queue.popleft()
            self.islands.setdefault(item.id, item.island)
            options = None
            if item.recheck:
                options = recheck_options(self.check_options, self.config.triggers, self.rng)
            else:
                self.store.update_individual(item.id, status="running", started_at=time.time())
            self.pool.submit(item.id, item.source, f"individual {item.id}", options)

    def _parent_fitness(self, row: Individual) -> float | None:
        return self.store.individual(row.parent_ids[0]).fitness if row.parent_ids else None

    def _finish(self, key: int, report: dict, worker: str | None, started_at: float) -> None:
        row = self.store.individual(key)
        parent_fitness = self._parent_fitness(row)
        if (report["correct"] and key not in self.rechecked
                and needs_recheck(parent_fitness, report.get("geomean_speedup"), report, self.config.triggers)):
            self.rechecked.add(key)  # only the re-check's verdict counts
            self.queue.appendleft(_Queued(key, self.store.source(row), self.islands.get(key), recheck=True))
            self.stats.last = f"#{key}: suspicious gain ({report.get('geomean_speedup'):.3f}), re-checking"
            return
        self.store.record_result(key, report, worker=worker, started_at=row.started_at or started_at)
        row = self.store.individual(key)
        self.monitor.observe(key, parent_fitness, row.fitness, self.proposals.pop(key, None))
        self.stats.evaluations += 1
        self.stats.session_evaluations += 1
        if row.status == "correct":
            self._join(row, self.store.source(row), self.islands.get(key))
            if row.operator == "seed" and self.stats.seed_id is None:
                self.stats.seed_id, self.stats.seed_fitness = row.id, row.fitness
            outcome = f"correct, speedup {row.fitness:.3f}"
        else:
            self.stats.failures[failure_kind(row.failure)] += 1
            outcome = f"rejected: {row.failure}"
            if "repair" in self.ops and row.operator in LLM_OPERATORS:
                self.repairs.append(row)
        self.stats.last = f"#{row.id} {row.operator} from {row.parent_ids or 'seed'}: {outcome}"
        self.population.migrate_if_due(self.stats.evaluations)
        self.population.record(self.stats.evaluations)
        self._save_counters()

    def _join(self, row: Individual, source: str, island: int | None) -> None:
        kernel = make_kernel(source, row.id, True, row.fitness, parent_ids=row.parent_ids,
                             generation=row.generation, operator=row.operator, knobs=row.knobs, report=row.report)
        self.population.add(kernel, island)
        best = self.population.best()
        self.stats.best_id, self.stats.best_fitness = best.id, best.fitness.values[1]

    def _save_counters(self) -> None:
        self.store.set_meta("counters", {"duplicates": self.stats.duplicates,
                                         "proposal_failures": dict(self.stats.proposal_failures)})
        self.store.set_meta("elapsed_s", self._elapsed())

    def _elapsed(self) -> float:
        return self.earlier_elapsed + time.time() - self.started

    def _over_time_or_money(self) -> bool:
        """Whether the wall-time or USD budget is spent: then nothing more is proposed or submitted."""
        budget, spent = self.config.budget, None
        if budget.wall_time_s is not None and self._elapsed() >= budget.wall_time_s:
            spent = f"wall-time budget of {budget.wall_time_s:g} s reached"
        elif budget.usd is not None and self.stats.llm and self.stats.cost_usd >= budget.usd:
            spent = f"USD budget of {budget.usd:g} reached"
        if spent and not self.halted:
            self.halted, self.stop_reason = True, spent
        return self.halted

    # -- the loop ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        if self.pool is not None:
            self.stats.in_flight = self.pool.in_flight()
            self.stats.busy_fraction = self.pool.busy_fraction()
        self.stats.queued = len(self.queue)
        self.stats.proposing = len(self.proposing)
        self.stats.elapsed_s = self._elapsed()
        if self.stats.llm:
            self.stats.cost_usd = self.store.total_cost()

    def _wait(self) -> list:
        """Block until an evaluation finishes or, when a slot is idle, a proposal arrives."""
        if self.pool.in_flight() and (not self.pool.free_slots() or not self.proposing):
            return self.pool.wait(PROGRESS_INTERVAL_S)
        finished = self.pool.wait(0) if self.pool.in_flight() else []
        if not finished and self.proposing:
            self.proposal_done.wait(0.2)
        return finished

    def run(self) -> SearchResult:
        """Drive the search to its budget. Ctrl-C or SIGTERM at any moment (also while Ray starts) stops it
        with status 'stopped': `--resume` continues it. A bad resource setting is BadInput (status 'stopped')."""
        import ray

        main_thread = threading.current_thread() is threading.main_thread()
        previous_handler = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None  # `kill`, `ray job stop`
        owns_ray = not ray.is_initialized()
        executor: ThreadPoolExecutor | None = None
        self.pool: EvaluationPool | None = None
        status, last_progress, error = "stopped", 0.0, None
        try:
            try:
                connect(self.config.resources.address)
            except SystemExit as exc:  # Ray's own SIGTERM handler, in place while it starts
                if exc.code != signal.SIGTERM:
                    raise
                self.sigterm_in_ray_start = True
                raise KeyboardInterrupt from None
            if main_thread:
                signal.signal(signal.SIGTERM, _interrupt)  # again: Ray sets its own
            self.pool = self._start_pool()
            executor = ThreadPoolExecutor(max_workers=self.config.llm.max_concurrent, thread_name_prefix="proposal")
            self._restore()
            while True:
                loop_started = time.perf_counter()
                self._drain_proposals()
                self._over_time_or_money()
                self._submit_ready()
                self._start_proposals(executor)
                self._submit_ready()
                if not self.pool.in_flight() and not self.proposing and (not self.queue or self.halted):
                    break
                waited = time.perf_counter()
                finished = self._wait()
                after_wait = time.perf_counter()
                for item in finished:
                    self._finish(item.key, item.report, item.worker, item.started_at)
                self.stats.driver_seconds += (waited - loop_started) + (time.perf_counter() - after_wait)
                if finished or time.time() - last_progress > PROGRESS_INTERVAL_S:
                    self._refresh()
                    self.progress(self.stats)
                    last_progress = time.time()
            self.stop_reason = self.stop_reason or self._end_reason()
            self._retime_best()
            status = "finished"
        except KeyboardInterrupt:
            self.stop_reason = "interrupted (resume with --resume)"
        except BadInput as exc:
            self.stop_reason, error = f"error: {exc}", exc
        finally:
            with _signals_deferred(main_thread):  # a second Ctrl-C does not cut the closing of the store short
                if executor is not None:
                    executor.shutdown(wait=False, cancel_futures=True)
                self._refresh()
                best = self.store.best(1)
                self._close(status)
                self.lock.release()
            try:
                if self.pool is not None:
                    self.pool.shutdown()
                if owns_ray:
                    ray.shutdown()  # also after an interrupted start: it stops what was started
            finally:
                if previous_handler is not None:
                    signal.signal(signal.SIGTERM, previous_handler)
        if error is not None:
            raise error
        return SearchResult(self.stats, status, self.stop_reason, best[0] if best else None)

    def _start_pool(self) -> EvaluationPool:
        """The evaluation slots; settings the cluster cannot hold are refused here (Ray would wait forever)."""
        import ray

        res = self.config.resources
        slots, cpus, gpus = evaluation_slots(self.task, res.max_parallel, res.gpus_per_evaluation,
                                             res.cpus_per_evaluation)
        have = ray.cluster_resources().get("CPU", 0.0)
        if cpus > have:
            raise BadInput(f"field 'resources.cpus_per_evaluation': {cpus:g} CPUs per evaluation, and the Ray "
                           f"cluster has {have:g}")
        if slots * cpus > have:
            field_name = "resources.max_parallel" if res.max_parallel else "resources.cpus_per_evaluation"
            raise BadInput(f"field '{field_name}': {slots} evaluations at once of {cpus:g} CPUs each need "
                           f"{slots * cpus:g} CPUs, and the Ray cluster has {have:g}")
        self.stats.slots = slots
        llm_lookahead = self.config.llm.max_concurrent if self.stats.llm else 0
        self.lookahead = slots * self.config.offspring_per_step + llm_lookahead
        return EvaluationPool(self.task, self.check_options, slots, cpus, gpus)

    def _retime_best(self) -> None:
        """Re-time the best kernel, when it is not a seed, against the seed it is compared with, with more
        rounds: the summary, `lineage` and the report then say whether its gain stands above the noise."""
        best = self.store.best(1)
        if not self.retime_best or not best or best[0].operator == "seed" or self.stats.seed_id is None:
            return
        best, seed = best[0], self.store.individual(self.stats.seed_id)
        earlier = self.store.meta().get(RETIME_KEY)
        if earlier and (earlier.get("id"), earlier.get("seed_id")) == (best.id, seed.id):
            return  # re-timed in an earlier session
        from evokernel.harness.check import DEFAULT_ROUNDS
        from evokernel.lineage import retime_record

        rounds = RETIME_ROUND_FACTOR * DEFAULT_ROUNDS.get(self.task.backend, 10)
        reference = self.store.source_path(seed.source_hash, seed.language).resolve()
        options = dataclasses.replace(self.check_options, speed_reference=str(reference), rounds=rounds, seed=None)
        self.stats.last = f"re-timing the best kernel #{best.id} against the seed #{seed.id} ({rounds} rounds)"
        self._refresh()
        self.progress(self.stats)
        self.pool.submit(("retime", best.id), self.store.source(best), f"individual {best.id} against seed {seed.id}",
                         options)
        finished = []
        while not finished:
            finished = self.pool.wait(PROGRESS_INTERVAL_S)
        record = retime_record(finished[0].report, best, seed, rounds)
        self.store.set_meta(RETIME_KEY, record)
        self.stats.last = (f"#{best.id} re-timed against seed #{seed.id}: {record['geomean'] or 0:.3f}x, "
                           f"{record['verdict']}")

    def _end_reason(self) -> str:
        if not len(self.population):
            return "no kernel passed the harness (not even a seed)"
        budget = self.config.budget.evaluations
        if budget is not None and self.stats.evaluations >= budget:
            return f"evaluation budget of {budget} reached"
        return "nothing left to evaluate"

    def _close(self, status: str) -> None:
        self._save_counters()
        sessions = self.store.meta().get("sessions", [])
        if sessions:
            sessions[-1]["stopped_at"] = time.time()
        self.store.set_meta("sessions", sessions)
        self.store.set_meta("stopped_at", time.time())
        self.store.set_meta("status", status)
        self.store.set_meta("stop_reason", self.stop_reason)
        self.store.set_meta("logbook", list(self.population.logbook))
        self.store.close()
