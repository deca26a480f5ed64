"""Knob parsing, mutation and crossover (no LLM, no harness)."""

import random

import pytest

from evokernel.builtin_tasks import ATTENTION_SEEDS
from evokernel.harness import get_task
from evokernel.mutations import Context, Parent, ProposalFailed, registered_operators
from evokernel.mutations.operators.knobs import KnobCrossover, KnobMutation
from evokernel.source import KnobError, knob_values, normalized_hash, parse_knobs, set_knobs

SOURCE = """#include "x.h"
#define BLOCK 4      // @knob 1,2,4,8
#define UNROLL 0  // @knob 0,1
#define FIXED 3
int f(void) { return BLOCK * UNROLL + FIXED; }
"""


def context(seed: int = 0) -> Context:
    return Context(rng=random.Random(seed), task=get_task("attention-fwd-cpu"))


def test_parse_knobs_reads_values_and_lines():
    knobs = parse_knobs(SOURCE)
    assert list(knobs) == ["BLOCK", "UNROLL"]
    assert knobs["BLOCK"].value == "4" and knobs["BLOCK"].values == ("1", "2", "4", "8")
    assert knobs["UNROLL"].line == 3


def test_task_originals_carry_knobs():
    cpu = parse_knobs(get_task("attention-fwd-cpu").original.read_text())
    assert {"BLOCK_Q", "BLOCK_K", "KEY_OUTER", "THREADS"} <= set(cpu)
    assert cpu["THREADS"].value == "1"


@pytest.mark.parametrize("line, reason", [
    ("#define BLOCK 3  // @knob 1,2,4", "default 3, which is not one of its values"),
    ("#define BLOCK 2  // @knob 1,2,2", "lists a value twice"),
    ("#define BLOCK 2  // @knob", "lists no usable values"),
    ("#define BLOCK 2  // @knob 1,,2", "lists no usable values"),
    ("int block = 2;  // @knob 1,2", "not on a '#define NAME VALUE' line"),
])
def test_bad_knob_lines_are_rejected_with_a_reason(line, reason):
    with pytest.raises(KnobError, match=reason) as info:
        parse_knobs(f"int x;\n{line}\n")
    assert "line 2" in str(info.value)


def test_a_knob_defined_twice_is_rejected():
    with pytest.raises(KnobError, match="defined twice"):
        parse_knobs("#define A 1 // @knob 1,2\n#define A 2 // @knob 1,2\n")


def test_set_knobs_changes_only_the_value_and_keeps_the_marker():
    changed = set_knobs(SOURCE, {"BLOCK": "8"})
    assert "#define BLOCK 8      // @knob 1,2,4,8" in changed
    assert knob_values(changed) == {"BLOCK": "8", "UNROLL": "0"}
    with pytest.raises(KnobError, match="does not allow 5"):
        set_knobs(SOURCE, {"BLOCK": "5"})


def test_mutation_changes_exactly_one_knob_to_an_allowed_value():
    parent = Parent(id=1, source=SOURCE, fitness=1.0)
    for seed in range(20):
        child = KnobMutation()([parent], context(seed))
        before, after = knob_values(SOURCE), knob_values(child.source)
        changed = [name for name in before if before[name] != after[name]]
        assert len(changed) == 1
        assert after[changed[0]] in parse_knobs(SOURCE)[changed[0]].values
        assert child.parent_ids == [1] and child.knobs == after and child.operator == "knob-mutation"


def test_mutation_without_knobs_fails_as_a_proposal():
    with pytest.raises(ProposalFailed, match="no knob"):
        KnobMutation()([Parent(id=1, source="int f(void){return 0;}", fitness=1.0)], context())


def test_crossover_mixes_values_of_both_parents_on_the_first_source():
    first = Parent(id=1, source=SOURCE, fitness=1.0)
    second = Parent(id=2, source=set_knobs(SOURCE, {"BLOCK": "1", "UNROLL": "1"}), fitness=1.0)
    children = [KnobCrossover()([first, second], context(seed)) for seed in range(10)]
    for child in children:
        values = knob_values(child.source)
        assert values in ({"BLOCK": "4", "UNROLL": "1"}, {"BLOCK": "1", "UNROLL": "0"})  # differs from both
        assert child.parent_ids == [1, 2]
        assert child.source.endswith("int f(void) { return BLOCK * UNROLL + FIXED; }\n")


def test_crossover_needs_the_same_knob_set():
    other = Parent(id=2, source="#define BLOCK 1 // @knob 1,2\n", fitness=1.0)
    with pytest.raises(ProposalFailed, match="different knobs"):
        KnobCrossover()([Parent(id=1, source=SOURCE, fitness=1.0), other], context())


def test_crossover_mates_are_kernels_with_the_same_knobs_and_other_values():
    """The search draws a crossover's second parent among these: the two attention seeds (different knob
    sets) are never paired, two variants of one seed two or more knobs apart are."""
    fa2 = Parent(id=1, source=get_task("attention-fwd").original.read_text(), fitness=0.56)
    hopper_path = ATTENTION_SEEDS / "attention_hopper.cu"
    hopper = Parent(id=2, source=hopper_path.read_text(), fitness=0.93)
    variant = Parent(id=3, source=set_knobs(SOURCE, {"BLOCK": "8", "UNROLL": "1"}), fitness=1.0)
    mates = KnobCrossover.mates
    assert not mates(fa2, hopper) and not mates(hopper, fa2)
    assert mates(Parent(id=4, source=SOURCE, fitness=1.0), variant)
    one_apart = Parent(id=5, source=set_knobs(SOURCE, {"BLOCK": "8"}), fitness=1.0)
    assert not mates(variant, one_apart) and not mates(one_apart, Parent(id=7, source=SOURCE, fitness=1.0))
    assert not mates(variant, Parent(id=6, source=SOURCE.replace("// @knob 0,1", "// @knob 0,1,2"), fitness=1.0))


def test_knob_operators_are_registered():
    registered = registered_operators()
    assert registered["knob-mutation"].factory is KnobMutation and registered["knob-crossover"].factory is KnobCrossover
    assert not registered["knob-mutation"].uses_llm and registered["knob-mutation"].default_weight == 1.0


class KnownSources:
    """A stand-in for the run's store: which normalized hashes the run already holds."""

    def __init__(self, sources: list[str]) -> None:
        self.hashes = {normalized_hash(s) for s in sources}

    def find_duplicate(self, normalized: str) -> object | None:
        return object() if normalized in self.hashes else None


def known_context(seed: int, sources: list[str]) -> Context:
    return Context(rng=random.Random(seed), task=get_task("attention-fwd-cpu"), store=KnownSources(sources))


def test_mutation_proposes_only_one_knob_changes_the_run_does_not_hold():
    parent = Parent(id=1, source=SOURCE, fitness=1.0)
    held = [set_knobs(SOURCE, {"BLOCK": b}) for b in ("1", "2")] + [SOURCE]
    for seed in range(20):
        values = knob_values(KnobMutation()([parent], known_context(seed, held)).source)
        assert values in ({"BLOCK": "8", "UNROLL": "0"}, {"BLOCK": "4", "UNROLL": "1"})


def test_mutation_changes_two_knobs_once_every_one_knob_change_is_held_and_repeats_one_when_all_are():
    parent = Parent(id=1, source=SOURCE, fitness=1.0)
    one_knob = [set_knobs(SOURCE, {"BLOCK": b}) for b in ("1", "2", "8")] + [set_knobs(SOURCE, {"UNROLL": "1"})]
    child = KnobMutation()([parent], known_context(0, [SOURCE, *one_knob]))
    values = knob_values(child.source)
    assert values["UNROLL"] == "1" and values["BLOCK"] != "4" and child.knobs == values
    everything = [set_knobs(SOURCE, {"BLOCK": b, "UNROLL": u}) for b in ("1", "2", "4", "8") for u in ("0", "1")]
    repeated = KnobMutation()([parent], known_context(0, everything))  # the search drops it as a duplicate
    assert repeated.source in everything and repeated.source != SOURCE


def test_crossover_skips_children_the_run_holds():
    first = Parent(id=1, source=SOURCE, fitness=1.0)
    second = Parent(id=2, source=set_knobs(SOURCE, {"BLOCK": "1", "UNROLL": "1"}), fitness=1.0)
    held = [set_knobs(SOURCE, {"BLOCK": "4", "UNROLL": "1"})]
    for seed in range(10):
        child = KnobCrossover()([first, second], known_context(seed, held))
        assert knob_values(child.source) == {"BLOCK": "1", "UNROLL": "0"}
    both = held + [set_knobs(SOURCE, {"BLOCK": "1"})]
    assert KnobCrossover()([first, second], known_context(0, both)).source in both + [first.source, second.source]
