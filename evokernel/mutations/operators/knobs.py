"""The two operators that need no LLM, over a kernel's knobs (`evokernel.source.knobs`).

Knob mutation changes one knob to another allowed value; knob crossover takes each knob's value
from either parent (uniform crossover) and applies the result to the first parent's source.

Both skip children the run has already seen (the store's normalized hashes), because the search drops
those without evaluating them: on a small knob space most draws were such duplicates, and a run stopped
after 200 of them in a row with much of the space unexplored. Mutation changes more knobs at once only
when every one-knob change of the parent has been seen. When every draw is known, the operator returns
the last one, and the search counts it as the duplicate it is."""

from __future__ import annotations

import random
from collections.abc import Iterator

from evokernel.mutations import Context, Option, Parent, Proposal, ProposalFailed, register, registered_operators
from evokernel.source import KNOB_HINT, Knob, KnobError, normalized_hash, parse_knobs, set_knobs, tunable

def _parent_knobs(parent: Parent) -> dict[str, Knob]:
    try:
        knobs = parse_knobs(parent.source)
    except KnobError as exc:
        raise ProposalFailed(f"parent {parent.id}: {exc}") from None
    if not tunable(knobs):
        raise ProposalFailed(f"parent {parent.id} has no knob with more than one value ({KNOB_HINT})")
    return knobs


class _KnobOperator:
    """Built like every operator, from the run's config (the knob operators read only their options)."""

    name = ""
    uses_llm = False

    def __init__(self, config: object = None) -> None:
        self.config = config
        self.settings = registered_operators()[self.name].settings(config)


@register(default_weight=1.0)
class KnobMutation(_KnobOperator):
    """Change one knob of the parent to another allowed value (more knobs once every one-knob change is known)."""

    name = "knob-mutation"
    arity = 1
    options = (Option("farther_draws", "random changes of 2, 3, ... knobs tried per count once every one-knob "
                      "change of the parent is known", 32, minimum=1, maximum=10_000),)

    def __call__(self, parents: list[Parent], context: Context) -> Proposal:
        parent = parents[0]
        knobs = _parent_knobs(parent)
        change: dict[str, str] = {}
        for change in self._changes(knobs, context.rng, self.settings["farther_draws"]):
            source = set_knobs(parent.source, change)
            if not _known(source, context):
                break
        return self._proposal(parent, knobs, change, source)

    @staticmethod
    def _changes(knobs: dict[str, Knob], rng: random.Random, farther_draws: int) -> Iterator[dict[str, str]]:
        """Every one-knob change in random order, then `farther_draws` random changes of 2, 3, ... knobs."""
        yield from _one_knob_changes(knobs, rng)
        tunable = [name for name, k in knobs.items() if len(k.values) > 1]
        for count in range(2, len(tunable) + 1):
            for _ in range(farther_draws):
                yield {name: rng.choice([v for v in knobs[name].values if v != knobs[name].value])
                       for name in rng.sample(tunable, count)}

    def _proposal(self, parent: Parent, knobs: dict[str, Knob], change: dict[str, str], source: str) -> Proposal:
        child = {name: k.value for name, k in knobs.items()} | change
        return Proposal(source=source, operator=self.name, parent_ids=[parent.id], knobs=child)


def _one_knob_changes(knobs: dict[str, Knob], rng: random.Random) -> Iterator[dict[str, str]]:
    """Every one-knob change, in random order: each drawn as a knob, then one of its other values (the
    first draw is the plain mutation's), without repeats."""
    remaining = {name: [v for v in k.values if v != k.value] for name, k in knobs.items() if len(k.values) > 1}
    while remaining:
        name = rng.choice(list(remaining))
        value = rng.choice(remaining[name])
        remaining[name].remove(value)
        if not remaining[name]:
            del remaining[name]
        yield {name: value}


def _known(source: str, context: Context) -> bool:
    """Whether the run already holds this kernel (proposed or evaluated); without a store nothing is known."""
    return context.store is not None and context.store.find_duplicate(normalized_hash(source)) is not None


@register(default_weight=0.5)
class KnobCrossover(_KnobOperator):
    """Uniform crossover of the knob values of two parents with the same knobs."""

    name = "knob-crossover"
    arity = 2
    options = (Option("draws", "draws to find a child that differs from both parents and is not yet in the run",
                      32, minimum=1, maximum=10_000),)

    def __call__(self, parents: list[Parent], context: Context) -> Proposal:
        first, second = parents[0], parents[1]
        a = {name: k.value for name, k in _parent_knobs(first).items()}
        b = {name: k.value for name, k in _parent_knobs(second).items()}
        if set(a) != set(b):
            raise ProposalFailed(f"parents {first.id} and {second.id} have different knobs "
                                 f"({','.join(sorted(a))} vs {','.join(sorted(b))})")
        if a == b:
            raise ProposalFailed(f"parents {first.id} and {second.id} have the same knob values")
        child = a
        for _ in range(self.settings["draws"]):  # a child that differs from both parents and is not known
            child = {name: (a if context.rng.random() < 0.5 else b)[name] for name in a}
            if child not in (a, b) and not _known(self._source(first, second, child), context):
                break
        return Proposal(source=self._source(first, second, child), operator=self.name,
                        parent_ids=[first.id, second.id], knobs=child)

    @staticmethod
    def mates(first, other) -> bool:
        """A second parent has the first's knobs (names and allowed values) and differs in two values or
        more: parents one knob apart have no child but themselves."""
        try:
            a, b = parse_knobs(first.source), parse_knobs(other.source)
        except KnobError:
            return False
        return ({n: k.values for n, k in a.items()} == {n: k.values for n, k in b.items()}
                and sum(a[n].value != b[n].value for n in a) >= 2)

    @staticmethod
    def _source(first: Parent, second: Parent, child: dict[str, str]) -> str:
        try:
            return set_knobs(first.source, child)
        except KnobError as exc:  # the second parent uses a value the first does not allow
            raise ProposalFailed(f"crossover of {first.id} and {second.id}: {exc}") from None
