"""The search's driver loop: a steady-state evolutionary loop over kernels.

The driver keeps every evaluation slot busy: when one evaluation finishes it records the result,
updates the population and immediately submits the next proposal, which was prepared while the
slot was busy (LLM proposals run concurrently in a thread pool, knob proposals inline). Every
individual is written to the lineage store when proposed (pending), marked running when submitted
and finished when its result arrives, so a killed run resumes without losing or repeating an
evaluation: `Search(config, run_dir, resume=True)` re-submits what was pending or running.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter, deque
import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


from evokernel.bank import TriggerMonitor
from evokernel.config import RunConfig
from evokernel.errors import BadInput
from evokernel.evaluation import Evaluator, start_evaluator
from evokernel.harness import CheckOptions, Task, get_task, rejection_kind, show_source_paths
from evokernel.mutations import AnswerPending, Operator, Proposal, ProposalFailed, llm_operator_names, registered_operators
from evokernel.population import Population, make_kernel
from evokernel.search import run_dir as runs
from evokernel.search import retime
from evokernel.search.answers import FileAnswers
from evokernel.search.budget import end_reason, time_or_money_spent
from evokernel.search.interrupts import interrupt, signals_deferred
from evokernel.search.operator_contexts import Job, OperatorContexts, configured_operators, operator_services, parent_view
from evokernel.search.progress import SearchResult, SearchStats, proposal_failure_kind
from evokernel.search.question_queue import HumanQuestions
from evokernel.search.recheck import recheck_options, recheck_reason
from evokernel.source import normalized_hash
from evokernel.store import Individual, ProposalFailure, prompt_box

UNPRODUCTIVE_LIMIT = 200  # proposals in a row that were duplicates or failed: the space is exhausted
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
        self.seeds = [] if resume else runs.seed_sources(config, self.task)  # bad input: before anything is written
        self.seed_files = {normalized_hash(source): path for path, source in self.seeds}
        self.ops: dict[str, Operator] = {}
        self.weights: dict[str, float] = {}
        self._setup_operators(operator_set)
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
                if "repair" in self.ops and row.operator in llm_operator_names() and row.id not in repairing:
                    self.repairs.append(row)  # rejected in an earlier session, before a repair was proposed
            self._note_seed(row)
        self.stats.evaluations = sum(1 for row in earlier if row.status in ("correct", "rejected"))
        self.human.restore()
        self.answers.restore()
        if self.resume:
            self.notify(f"resuming {self.run_dir}: {self.stats.evaluations} evaluations done, "
                        f"{len(self.queue)} re-submitted, population {len(self.population)}")

    # -- proposals --------------------------------------------------------------------------------
    def _next_job(self, llm_room: bool) -> Job | None:
        job = self._human_job() if llm_room else None
        if job is not None:
            return job
        if "repair" in self.ops and self.repairs and llm_room:
            failing = self.repairs.popleft()
            parent = parent_view(self.store, failing, self.store.source(failing))
            return Job("repair", [parent], self.islands.get(failing.id), failing.generation + 1, "repair")
        if not len(self.population):
            return None
        names = [n for n in self.ops if n != "repair" and (llm_room or not self.ops[n].uses_llm)
                 and self.ops[n].arity <= len(self.population)]  # no crossover of a kernel with itself
        if not names:
            return None
        while True:  # an operator whose parents the island cannot provide gives way to another
            name = self.rng.choices(names, weights=[self.weights[n] for n in names])[0]
            island, parents = self.population.select(self.ops[name].arity, getattr(self.ops[name], "mates", None))
            if len(parents) == self.ops[name].arity:
                break
            names.remove(name)
            if not names:
                return None
        trigger = self.monitor.active() if self.ops[name].uses_llm else "default"
        return Job(name, [parent_view(self.store, p) for p in parents], island, 1 + max(p.generation for p in parents),
                    trigger)

    def _human_job(self) -> Job | None:
        """A person's question (`evokernel ask`) put to the model about its target, when one waits and its target
        is there (the best kernel: once the population has one)."""
        if self.human_operator is None:
            self.human.tell_waiting("this session has no question operators (a model: --model or llm.models); "
                                    "they are asked when the run is resumed with one")
            return None
        job = self.human.next_job(self.human_operator.name, self.population, self.store, self.islands)
        if job is not None:
            self.stats.last = f"asking {job.question.id} (asked by a person) about #{job.parents[0].id}"
        return job

    def _call(self, job: Job, seed: float) -> Proposal:
        operator = self.human_operator if job.question is not None else self.ops[job.operator]
        return operator(job.parents, self.contexts.make(seed, job.trigger, job.question))

    def _uses_llm(self, job: Job) -> bool:
        return job.question is not None or self.ops[job.operator].uses_llm

    def _room(self) -> bool:
        """Whether another proposal may start: within budget and lookahead."""
        pending = self.evaluator.in_flight() + len(self.queue) + len(self.proposing)
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
            self.notify(self.llm_stopped)  # (not also the live line's last event: it would print it again)
            self.store.set_meta("llm_stopped", self.llm_stopped)
            if not knobs:
                self.stop_reason = self.stop_reason or self.llm_stopped
        return True

    def _start_proposals(self, executor: ThreadPoolExecutor) -> None:
        self.human.poll()
        while self.stop_reason is None and self._room():
            unproductive = self.unproductive.total()
            if unproductive >= UNPRODUCTIVE_LIMIT:
                why, n = self.unproductive.most_common(1)[0]
                self.stop_reason = (f"no new kernels: the last {unproductive} proposals were duplicates or failed "
                                    f"(most often: {why}, {n} of {unproductive})")
                return
            asking = sum(1 for job in self.proposing.values() if self._uses_llm(job))
            llm_room = asking < self.config.llm.max_concurrent and not self._llm_stopped() and self._prompt_room(asking)
            job = self._next_job(llm_room)
            if job is None:
                return
            seed = self.rng.random()
            if self._uses_llm(job):
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
            except (ProposalFailed, AnswerPending) as exc:
                outcome = exc
            except Exception as exc:  # an operator bug must not end the run; it is counted and shown
                outcome = ProposalFailed(f"{type(exc).__name__}: {exc}")
            self._take(job, outcome)

    def _take(self, job: Job, outcome: Proposal | ProposalFailed | AnswerPending) -> None:
        if isinstance(outcome, AnswerPending):
            self.stats.last = f"{job.operator} from {[p.id for p in job.parents]}: {outcome}"
            self._answered(job, {"prompt": outcome.prompt_id})
            return
        if isinstance(outcome, ProposalFailed):
            self._failed(job, outcome)
            self._answered(job, {"failed": str(outcome)})
            return
        if normalized_hash(outcome.source) in self.known:
            self.unproductive["duplicates"] += 1
            self.stats.duplicates += 1
            if outcome.declared_limit:
                self.monitor.declared_limit(outcome)
            if job.request_id is not None:
                self._answered(job, {"duplicate_of": self.store.find_duplicate(normalized_hash(outcome.source)).id})
            return
        self.unproductive.clear()
        child_id = self._store_child(outcome, job.island, job.generation)
        self.proposals[child_id] = outcome
        self._answered(job, {"child": child_id})

    def _failed(self, job: Job, failure: ProposalFailed) -> None:
        """Record a proposal that made no kernel, counted by operator and kind of reason; the first of each
        kind in this run is said in full (later ones only counted, all kept in the database)."""
        reason, parent_ids = str(failure), [p.id for p in job.parents]
        kind = proposal_failure_kind(job.operator, reason)
        self.store.add_proposal_failure(ProposalFailure(operator=job.operator, kind=kind, reason=reason,
                                                        parent_ids=parent_ids, llm_call_id=failure.llm_call_id))
        parents = ", ".join(f"#{i}" for i in parent_ids)
        if not self.stats.proposal_failures[(job.operator, kind)]:
            call = f" (LLM call {failure.llm_call_id})" if failure.llm_call_id is not None else ""
            self.notify(f"{job.operator} made no kernel from {parents}{call}: {reason} (the first '{kind}' of "
                        f"{job.operator}: later ones are counted, not shown)")
        self.stats.proposal_failures[(job.operator, kind)] += 1
        self.unproductive[f"{job.operator}: {kind}"] += 1
        self.stats.last = f"{job.operator} from {parents} failed: {reason}"

    # -- answers to the files model's prompts -------------------------------------------------------
    def _prompt_room(self, asking: int) -> bool:
        """Whether the question operators may ask now, `asking` questions being asked (not when only the files
        model answers and its open prompts would pass llm.max_open_prompts, or an answer's child waits)."""
        client = self.services.get("llm")
        # no prompt while an answer's child waits for its evaluation: the next prompts are about evaluated kernels
        return client is None or (client.prompt_room(asking, self.store)
                                  and not (self.answered_unevaluated and client.files_only))

    def _take_answers(self) -> bool:
        """Take the answers given to open prompts: each becomes a child (or a recorded failure) in the
        transaction that closes its prompt. True when one was taken."""
        if "llm" not in self.services:
            return False  # a session without a model: its answers wait for one that has
        given = self.answers.poll()
        for answer in given:
            if answer.text == prompt_box.WITHDRAWN:
                self.store.close_prompt(answer.prompt.id, "withdrawn", answer.answered_by)
                self.notify(f"prompt {answer.prompt.id} withdrawn by {answer.answered_by or 'a person'}")
                continue
            job = self.answers.job(answer.prompt)
            with self.store.transaction():
                outcome = self.answers.outcome(answer, self.services["llm"])
                self._take(job, outcome)
                if isinstance(outcome, ProposalFailed):
                    self.store.close_prompt(answer.prompt.id, "failed", answer.answered_by,
                                            outcome.llm_call_id, reason=str(outcome))
                else:
                    kernel = self.store.find_duplicate(normalized_hash(outcome.source))
                    self.store.close_prompt(answer.prompt.id, "answered", answer.answered_by, outcome.llm_call_id,
                                            child_id=kernel.id if kernel else None)
                    if kernel is not None and kernel.status == "pending":
                        self.answered_unevaluated.add(kernel.id)
        return bool(given)

    def _await_answers(self) -> bool:
        """With nothing else to do but open prompts: wait for their answers up to llm.answer_wait_s (True:
        go on looping); else say where they are and stop."""
        waiting = self.store.open_prompt_count() if "llm" in self.services else 0
        budget = self.config.budget.evaluations
        if not waiting:
            return False
        if self.halted or (budget is not None and self.stats.evaluations >= budget):
            self.notify(f"{waiting} prompts still wait for answers (evokernel prompts {self.run_dir}): "
                        "a --resume takes the answers given meanwhile")
            return False
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        if now - self.idle_since < self.config.llm.answer_wait_s:
            self.stats.last = f"waiting for answers to {waiting} prompts (evokernel prompts {self.run_dir})"
            time.sleep(min(0.5, self.answers.poll_interval_s))
            return True
        self.stop_reason = self.stop_reason or (
            f"{waiting} prompts wait for answers: answer them (evokernel prompts {self.run_dir}; "
            f"evokernel answer {self.run_dir} ID FILE) and continue with evokernel run --resume {self.run_dir}")
        return False

    def _answered(self, job: Job, outcome: dict) -> None:
        """Record what asking a person's question produced (nothing to record for other jobs)."""
        if job.request_id is not None:
            self.human.finished(job.request_id, outcome)

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
            if "repair" in self.ops and row.operator in llm_operator_names():
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
        """Keep the fastest correct seed: with several seeds, a kernel of the search counts as a gain only
        over the best one (the end-of-run re-timing is against it too)."""
        if (row.operator == "seed" and row.status == "correct" and row.fitness
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
