"""How the search gets its children: which operator proposes next (a person's question first, then repairs,
then an operator drawn by weight whose parents the population can provide), proposals started (LLM ones in
the thread pool, knob ones inline) and taken (a child, a duplicate, a failure counted by operator and kind,
or a prompt left for an answer), and the `files` model's answers taken as they are given.

`Proposing` is a part of `Search` (`evokernel.search.driver`): it reads and writes the search's own state
(operators, population, store, queue, counters) and hands each new child to `Search._store_child`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from evokernel.mutations import AnswerPending, Proposal, ProposalFailed, registered_operators
from evokernel.mutations.first_kernel import FIRST_KERNEL
from evokernel.search.operator_contexts import Job, parent_view
from evokernel.search.progress import proposal_failure_kind
from evokernel.source import normalized_hash
from evokernel.store import ProposalFailure, prompt_box

UNPRODUCTIVE_LIMIT = 200  # proposals in a row that were duplicates or failed: the space is exhausted


class Proposing:
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
            return self._first_kernel_job() if self.writes_first_kernel and llm_room else None
        names = [n for n in self.ops if n not in ("repair", FIRST_KERNEL) and (llm_room or not self.ops[n].uses_llm)
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

    def _first_kernel_job(self) -> Job | None:
        """While the run has no correct kernel: the first-kernel operator's next answer, a fix of the last
        rejected first kernel if there is one; None while one is written or evaluated, and once its attempts
        (operators.first-kernel.max_attempts) are spent: then the run stops, saying so."""
        if self.queue or self.evaluator.in_flight() or any(j.operator == FIRST_KERNEL for j in self.proposing.values()):
            return None
        written = [row for row in self.store.individuals() if row.operator == FIRST_KERNEL]
        spent = len(written) + sum(n for (name, _), n in self.stats.proposal_failures.items() if name == FIRST_KERNEL)
        allowed = registered_operators()[FIRST_KERNEL].settings(self.config)["max_attempts"]
        if spent >= allowed:
            self.stop_reason = self.stop_reason or (
                f"no correct first kernel in {spent} answers (operators.{FIRST_KERNEL}.max_attempts = {allowed}): "
                "give your own with --seed-kernel FILE")
            return None
        failing = written[-1] if written else None
        parents = [parent_view(self.store, failing, self.store.source(failing))] if failing else []
        return Job(FIRST_KERNEL, parents, None, failing.generation + 1 if failing else 0, FIRST_KERNEL)

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
        parents = ", ".join(f"#{i}" for i in parent_ids) or "the task's reference"
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
