"""The search's driver loop: a steady-state evolutionary loop over kernels.

The driver keeps every evaluation slot busy: when one evaluation finishes it records the result,
updates the population and immediately submits the next proposal, which was prepared while the
slot was busy (LLM proposals run concurrently in a thread pool, knob proposals inline). Every
individual is written to the lineage store when proposed (pending), marked running when submitted
and finished when its result arrives, so a killed run resumes without losing or repeating an
evaluation: `Search(config, run_dir, resume=True)` re-submits what was pending or running.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from evokernel.bank import TriggerMonitor
from evokernel.config import RunConfig
from evokernel.errors import BadInput
from evokernel.evaluation import Evaluator, start_evaluator
from evokernel.harness import CheckOptions, Task, get_task, rejection_kind, show_source_paths
from evokernel.mutations import Operator, Proposal, llm_operator_names, registered_operators
from evokernel.mutations.first_kernel import FIRST_KERNEL
from evokernel.population import Population, make_kernel
from evokernel.search import run_dir as runs
from evokernel.search import retime
from evokernel.search.answers import FileAnswers
from evokernel.search.budget import end_reason, time_or_money_spent
from evokernel.search.interrupts import interrupt, signals_deferred
from evokernel.search.operator_contexts import Job, OperatorContexts, configured_operators, operator_services
from evokernel.search.progress import SearchResult, SearchStats
from evokernel.search.proposing import Proposing
from evokernel.search.question_queue import HumanQuestions
from evokernel.search.recheck import recheck_options, recheck_reason
from evokernel.source import KNOB_HINT, KnobError, normalized_hash, parse_knobs, tunable
from evokernel.store import Individual

PROGRESS_INTERVAL_S = 1.0
# A child screened against reused speed-reference times within this fraction of the best fitness is timed
# interleaved: reused times may be off by a percent or so, and whatever could become the best is measured as
# `evokernel check` measures it.
CONFIRM_MARGIN = 0.03


@dataclass
class _Queued:
    id: int
    source: str
    island: int | None
    recheck: bool = False  # a second, stricter check of a suspicious gain


class Search(Proposing):
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
        self.seeds = [] if resume else runs.seed_sources(config, self.task)  # bad input: before anything is written
        self.seed_files = {normalized_hash(source): path for path, source in self.seeds}
        self.ops: dict[str, Operator] = {}
        self.weights: dict[str, float] = {}
        self._setup_operators(operator_set)
        self.writes_first_kernel = self._first_kernel_needed(resume)
        if not config.llm.models and self.seeds and not any(_tunable(source) for _, source in self.seeds):
            self.notify(f"nothing for the search to change: no model is configured (--model MODEL, or llm.models) "
                        f"and no seed has a knob with more than one value ({KNOB_HINT}); the run checks its seeds")
        llm = any(op.uses_llm for op in self.ops.values())
        if llm and config.llm.models:
            from evokernel.bank import load_bank

            load_bank(config.bank.dirs, builtin=config.bank.builtin)  # a bad question file: before anything is written
        self.notify = notify or (lambda line: None)
        self.stats = SearchStats(self.run_dir, budget=config.budget.evaluations, llm=llm)
        self.lock, self.store, self.session = runs.open_run(self.run_dir, config, self.task, self.seeds, resume,
                                                            self.stats, self.notify, notes)
        try:
            self.services = operator_services(config, self.store, llm)
        except BaseException:
            runs.release_run(self.lock, self.store)
            raise
        self.contexts = OperatorContexts(self.store, self.task, self.services)
        self.human = HumanQuestions(self.run_dir, self.store, self.notify)
        self.answers = FileAnswers(self.run_dir, self.store, self.notify)
        self.idle_since: float | None = None  # since when only open prompts of the files model are left
        self.answered_unevaluated: set[int] = set()  # children of the files model's answers, not yet evaluated
        # asks people's questions; None when this session has no question operators (no model)
        self.human_operator: Operator | None = (
            (self.ops.get("question-mutation") or registered_operators()["question-mutation"].factory(config))
            if self.services else None)
        self.rng = random.Random(f"{config.random_seed}:{self.session.index}")
        random.seed(f"{config.random_seed}:{self.session.index}:deap")  # DEAP's selection draws from `random`
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
                                          reference_reuse_s=config.reference_reuse_s,
                                          warm_worker=True)  # each evaluation slot keeps its next worker started
        self.proposing: dict[Future, Job] = {}
        self.evaluator: Evaluator | None = None  # started by run()
        # SIGTERM while Ray's core worker was connecting: its signal handler can abort the process at exit,
        # so a command should end with os._exit once its output is out
        self.sigterm_in_ray_start = False
        self.proposal_done = threading.Event()
        self.unproductive: Counter[str] = Counter()  # why the proposals since the last new kernel made none
        self.stop_reason: str | None = None  # why no more proposals are made
        self.halted = False  # time or money is spent, or interrupted: queued kernels wait for a resume
        self.llm_stopped: str | None = None  # why the question operators stopped, once the LLM client gave up

    # -- set-up -----------------------------------------------------------------------------------
    def _setup_operators(self, operator_set: dict[str, tuple[Operator, float]] | None) -> None:
        if operator_set is None:
            operator_set = configured_operators(self.config, self.notify)
        for name, (op, weight) in operator_set.items():
            self.ops[name], self.weights[name] = op, weight
        if not self.ops:
            raise BadInput("field 'operators': no usable operator has a positive weight")

    def _first_kernel_needed(self, resume: bool) -> bool:
        """Whether the run starts from no kernel (a task without an original, no seeds): then the first-kernel
        operator writes its first kernel. BadInput, before anything is written, when no model can."""
        if self.task.has_original or self.config.seeds:
            return False
        if not self.config.llm.models:
            if resume:
                return False  # a resumed run goes on from the kernels it has
            raise BadInput(f"task {self.task.name} has no original kernel: a model writes the first one (--model "
                           "MODEL or llm.models in the config), or give your own (--seed-kernel FILE or seeds)")
        if FIRST_KERNEL not in self.ops:  # weight 0: never drawn, called while the run has no kernel
            self.ops[FIRST_KERNEL] = registered_operators()[FIRST_KERNEL].factory(self.config)
            self.weights[FIRST_KERNEL] = 0.0
        return True

    def _repairable(self, row: Individual) -> bool:
        """Whether the repair operator takes this rejected kernel (an LLM child; a first kernel is fixed by the
        first-kernel operator itself)."""
        return "repair" in self.ops and row.operator in llm_operator_names() and row.operator != FIRST_KERNEL

    def _restore(self) -> None:
        """Load the store: known kernels, the population of correct ones, what is left to evaluate."""
        earlier = self.store.individuals()
        repairing = ({row.parent_ids[0] for row in earlier if row.operator == "repair" and row.parent_ids}
                     | {p.parent_ids[0] for p in self.store.prompts("open") if p.operator == "repair" and p.parent_ids})
        for row in earlier:
            self.known.add(row.normalized_hash)
            if row.status == "correct":
                self._join(row, self.store.source(row), None)
            elif row.status in ("pending", "running"):
                self.store.update_individual(row.id, status="pending", started_at=None)
                self.queue.append(_Queued(row.id, self.store.source(row), None))
                if (row.model or "").startswith("files"):
                    self.answered_unevaluated.add(row.id)
            elif row.status == "rejected":
                self.stats.failures[rejection_kind(row.failure)] += 1
                if self._repairable(row) and row.id not in repairing:
                    self.repairs.append(row)  # rejected in an earlier session, before a repair was proposed
            self._note_seed(row)
        self.stats.evaluations = sum(1 for row in earlier if row.status in ("correct", "rejected"))
        self.human.restore()
        self.answers.restore()
        for item in self.queue:  # the seeds (or a resumed run's pending kernels) compile while the slots start
            self.evaluator.prebuild(item.source)
        if self.resume:
            self.notify(f"resuming {self.run_dir}: {self.stats.evaluations} evaluations done, "
                        f"{len(self.queue)} re-submitted, population {len(self.population)}")

    def _store_child(self, proposal: Proposal, island: int | None, generation: int) -> int:
        row = runs.individual_row(proposal, generation, self.task.language)
        child_id = self.store.add_individual(row, proposal.source)
        self.known.add(row.normalized_hash)
        self.islands[child_id] = island
        self.queue.append(_Queued(child_id, proposal.source, island))
        if self.queue[0].id != child_id or not self.evaluator.free_slots():
            self.evaluator.prebuild(proposal.source)  # it will wait for a slot: compile it meanwhile
        return child_id

    # -- evaluation -------------------------------------------------------------------------------
    def _submit_ready(self) -> None:
        while self.queue and self.evaluator.free_slots() and not self._over_time_or_money():
            item = self.queue.popleft()
            self.islands.setdefault(item.id, item.island)
            if item.recheck:
                options = recheck_options(self.check_options, self.config.triggers, self.rng)
            else:
                options = self._screening_options()
                self.store.update_individual(item.id, status="running", started_at=time.time())
            self.evaluator.submit(item.id, item.source, f"individual {item.id}", options)

    def _screening_options(self) -> CheckOptions:
        """This child's options: a child screened within CONFIRM_MARGIN of the best fitness so far is timed
        interleaved with the speed reference (before any best, every child is)."""
        best = self.stats.best_fitness
        return dataclasses.replace(self.check_options, confirm_above=best * (1 - CONFIRM_MARGIN) if best else 0.0)

    def _parent_fitness(self, row: Individual) -> float | None:
        return self.store.individual(row.parent_ids[0]).fitness if row.parent_ids else None

    def _finish(self, key: int, report: dict, worker: str | None, started_at: float) -> None:
        row = self.store.individual(key)
        parent_fitness = self._parent_fitness(row)
        suspicious = report["correct"] and key not in self.rechecked and recheck_reason(
            parent_fitness, report.get("geomean_speedup"), report, self.config.triggers)
        if suspicious:
            self.rechecked.add(key)  # only the re-check's verdict counts
            self.queue.appendleft(_Queued(key, self.store.source(row), self.islands.get(key), recheck=True))
            self.stats.last = f"#{key}: suspicious gain, {suspicious}: re-checking"
            return
        self.store.record_result(key, report, worker=worker, started_at=row.started_at or started_at)
        self.answered_unevaluated.discard(key)
        row = self.store.individual(key)
        self.monitor.observe(key, parent_fitness, row.fitness, self.proposals.pop(key, None))
        self.stats.evaluations += 1
        self.stats.session_evaluations += 1
        self.stats.screened += bool(report.get("reference_reused"))
        if row.status == "correct":
            self._join(row, self.store.source(row), self.islands.get(key))
            self._note_seed(row)
            outcome = f"correct, speedup {row.fitness:.3f}"
        else:
            self.stats.failures[rejection_kind(row.failure)] += 1
            outcome = f"rejected: {show_source_paths(row.failure, self._source_name(row))}"
            if self._repairable(row):
                self.repairs.append(row)
        self.stats.last = f"#{row.id} {row.operator} from {row.parent_ids or 'seed'}: {outcome}"
        self.population.migrate_if_due(self.stats.evaluations)
        self.population.record(self.stats.evaluations)
        runs.save_counters(self.store, self.session, self.stats)

    def _source_name(self, row: Individual) -> str:
        """How compiler messages name a kernel: a seed by the file it came from, any other kernel by its
        source in the run."""
        seed = self.seed_files.get(row.normalized_hash) if row.operator == "seed" else None
        return seed or str(self.store.source_path(row.source_hash, row.language).relative_to(self.run_dir.parent))

    def _join(self, row: Individual, source: str, island: int | None) -> None:
        kernel = make_kernel(source, row.id, True, row.fitness, parent_ids=row.parent_ids,
                             generation=row.generation, operator=row.operator, knobs=row.knobs, report=row.report)
        self.population.add(kernel, island)
        best = self.population.best()
        self.stats.best_id, self.stats.best_fitness = best.id, best.fitness.values[1]

    def _note_seed(self, row: Individual) -> None:
        """Keep the fastest correct seed (or the first kernel the search wrote): with several seeds, a kernel of
        the search counts as a gain only over the best one (the end-of-run re-timing is against it too)."""
        if (row.operator in ("seed", FIRST_KERNEL) and row.status == "correct" and row.fitness
                and (self.stats.seed_fitness is None or row.fitness > self.stats.seed_fitness)):
            self.stats.seed_id, self.stats.seed_fitness = row.id, row.fitness

    def _over_time_or_money(self) -> bool:
        """Whether the wall-time or USD budget is spent: then nothing more is proposed or submitted."""
        cost = self.stats.cost_usd if self.stats.llm else None
        spent = None if self.halted else time_or_money_spent(self.config.budget, self.session.elapsed(), cost)
        if spent:
            self.halted, self.stop_reason = True, spent
        return self.halted

    # -- the loop ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        if self.evaluator is not None:
            self.stats.in_flight = self.evaluator.in_flight()
            self.stats.busy_fraction = self.evaluator.busy_fraction()
        self.stats.queued = len(self.queue)
        self.stats.proposing = len(self.proposing)
        self.stats.elapsed_s = self.session.elapsed()
        if self.stats.llm:
            self.stats.cost_usd = self.store.total_cost()

    def _wait(self) -> list:
        """Block until an evaluation finishes or, when a slot is idle, a proposal arrives."""
        if self.evaluator.in_flight() and (not self.evaluator.free_slots() or not self.proposing):
            return self.evaluator.wait(PROGRESS_INTERVAL_S)
        finished = self.evaluator.wait(0) if self.evaluator.in_flight() else []
        if not finished and self.proposing:
            self.proposal_done.wait(0.2)
        return finished

    def run(self) -> SearchResult:
        """Drive the search to its budget. Ctrl-C or SIGTERM at any moment (also while Ray starts) stops it
        with status 'stopped': `--resume` continues it. A bad resource setting is BadInput (status 'stopped')."""
        main_thread = threading.current_thread() is threading.main_thread()
        previous_handler = signal.signal(signal.SIGTERM, interrupt) if main_thread else None  # `kill`, `ray job stop`
        executor: ThreadPoolExecutor | None = None
        status, last_progress, error = "stopped", 0.0, None
        try:
            self.evaluator = self._start_evaluator()
            if main_thread:
                signal.signal(signal.SIGTERM, interrupt)  # again: Ray sets its own
            executor = ThreadPoolExecutor(max_workers=self.config.llm.max_concurrent, thread_name_prefix="proposal")
            self._restore()
            while True:
                loop_started = time.perf_counter()
                self._drain_proposals()
                if self._take_answers():
                    self.idle_since = None
                self._over_time_or_money()
                self._submit_ready()
                self._start_proposals(executor)
                self._submit_ready()
                if not self.evaluator.in_flight() and not self.proposing and (not self.queue or self.halted):
                    if self._await_answers():
                        continue
                    break
                self.idle_since = None
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
            self.stop_reason = self.stop_reason or end_reason(self.config.budget, self.stats.evaluations,
                                                                len(self.population))
            if self.retime_best:
                self.stats.last = retime.retime_best(self.store, self.evaluator, self.task, self.check_options,
                                                     self.stats.seed_id, self._announce) or self.stats.last
            status = "finished"
        except KeyboardInterrupt:
            self.stop_reason = "interrupted (resume with --resume)"
        except BadInput as exc:
            self.stop_reason, error = f"error: {exc}", exc
        finally:
            with signals_deferred(main_thread):  # a second Ctrl-C does not cut the closing of the store short
                if executor is not None:
                    executor.shutdown(wait=False, cancel_futures=True)
                self._refresh()
                best = self.store.best(1)
                runs.close_session(self.store, self.session, self.stats, status, self.stop_reason,
                                   list(self.population.logbook))
                self.lock.release()
            try:
                if self.evaluator is not None:
                    self.evaluator.shutdown()
            finally:
                if previous_handler is not None:
                    signal.signal(signal.SIGTERM, previous_handler)
        if error is not None:
            raise error
        return SearchResult(self.stats, status, self.stop_reason, best[0] if best else None)

    def _start_evaluator(self) -> Evaluator:
        """The configured evaluator; its slots set how far proposals run ahead of the evaluations."""
        try:
            evaluator = start_evaluator(self.config.resources, self.config.task, self.check_options)
        except SystemExit as exc:  # Ray's own SIGTERM handler, in place while it starts
            if exc.code != signal.SIGTERM:
                raise
            self.sigterm_in_ray_start = True
            raise KeyboardInterrupt from None
        self.stats.slots = evaluator.slots
        llm_lookahead = self.config.llm.max_concurrent if self.stats.llm else 0
        self.lookahead = evaluator.slots * (self.config.offspring_per_step + evaluator.builds_ahead) + llm_lookahead
        return evaluator

    def _announce(self, line: str) -> None:
        self.stats.last = line
        self._refresh()
        self.progress(self.stats)


def _tunable(source: str) -> bool:
    """Whether a seed gives the knob operators something to change (a malformed knob: their failure says why)."""
    try:
        return tunable(parse_knobs(source))
    except KnobError:
        return True
