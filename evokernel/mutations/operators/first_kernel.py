"""The `first-kernel` operator: a task's first kernel, written by a model from the task's reference, for a
search of a task that has no kernel yet (no original, no seeds). Its question comes from the bank's
`reference` layer; given a first kernel the harness rejected, it sends that kernel back with the reason.

It is never drawn by weight (default 0): the search calls it while it has no kernel, at most `max_attempts`
times (`evokernel.mutations.first_kernel` holds the flow it shares with `evokernel task new --model`)."""

from __future__ import annotations

from evokernel.mutations import Context, Option, Parent, Proposal, ProposalFailed, register
from evokernel.mutations.first_kernel import FIRST_KERNEL, ask_first_kernel, first_kernel_question, reference_source
from evokernel.mutations.operators.questions import QuestionOperator, failure_text
from evokernel.source import source_hash


@register(default_weight=0.0)
class FirstKernel(QuestionOperator):
    """Write a kernel from the reference; with a rejected parent (an earlier first kernel), fix it."""

    name = FIRST_KERNEL
    options = (Option("max_attempts", "answers a task's first kernel may take, each rejected kernel sent back with "
                                      "its reason", 3, minimum=1, maximum=20),)

    def __call__(self, parents: list[Parent], context: Context) -> Proposal:
        failing = parents[0] if parents else None
        error = failure_text(failing.report) if failing is not None else None
        if failing is not None and error is None:
            raise ProposalFailed(f"{self.name}: kernel #{failing.id} did not fail (nothing to repair)")
        client, policy = self._services(context)
        question = context.question or first_kernel_question(policy, context.rng, context.store)
        source, answer = ask_first_kernel(
            client, context.task, question, reference_source(context.task), context.rng,
            failing.source if failing else None, error, parent_ids=[p.id for p in parents[:1]], store=context.store,
            parent_hashes=[source_hash(p.source) for p in parents[:1]])
        return Proposal(source=source, operator=self.name, parent_ids=[p.id for p in parents[:1]],
                        question_id=question.id, trigger=FIRST_KERNEL, model=answer.model, llm_call_id=answer.call_id)
