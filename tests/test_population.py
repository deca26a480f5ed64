"""The gated fitness and the population (no harness, no Ray)."""

import random

from deap import tools

from evokernel.population import Population, gated_values, make_kernel


def test_a_rejected_kernel_never_outranks_a_correct_one():
    rejected = make_kernel("r", 1, False, None)
    slow = make_kernel("s", 2, True, 0.01)
    fast = make_kernel("f", 3, True, 2.0)
    assert gated_values(False, 5.0) == (0.0, 0.0)  # a speedup without correctness counts for nothing
    assert rejected.fitness < slow.fitness < fast.fitness
    assert [k.id for k in sorted([fast, rejected, slow], key=lambda k: k.fitness, reverse=True)] == [3, 2, 1]
    assert tools.selBest([rejected, slow], 1)[0].id == 2
    random.seed(0)
    picks = tools.selTournament([rejected, slow], 50, tournsize=2)
    assert sum(p.id == 2 for p in picks) > sum(p.id == 1 for p in picks)


def test_population_refuses_rejected_kernels_and_keeps_the_elite():
    population = Population(size=3, elitism=1, tournament_size=2, rng=random.Random(1))
    assert not population.add(make_kernel("r", 1, False, None))
    for i, speed in enumerate([1.0, 3.0, 0.5, 0.7, 0.9, 0.2], start=2):
        population.add(make_kernel("k", i, True, speed))
    assert len(population) == 3
    ids = {k.id for k in population}
    assert 3 in ids  # the best (3.0) is never pushed out
    assert population.best().id == 3
    entry = population.record(evaluations=7)
    assert entry["best"] == 3.0 and entry["size"] == 3


def test_selection_prefers_two_different_parents():
    population = Population(size=4, rng=random.Random(0))
    for i, speed in enumerate([1.0, 1.1]):
        population.add(make_kernel("k", i, True, speed))
    random.seed(3)
    for _ in range(20):
        _, parents = population.select(2)
        assert len({p.id for p in parents}) == 2


def test_later_parents_are_drawn_among_the_first_ones_mates():
    """Crossover partners: with `mates`, the second parent is one the first accepts; with none in the
    island, one parent comes back (the search then uses another operator)."""
    population = Population(size=6, rng=random.Random(0))
    for i, (source, speed) in enumerate([("a", 1.0), ("a", 1.1), ("b", 1.2), ("b", 1.3)]):
        population.add(make_kernel(source, i, True, speed))
    same_source = lambda first, other: first.source == other.source  # noqa: E731
    random.seed(5)
    for _ in range(30):
        _, parents = population.select(2, same_source)
        assert len(parents) == 2 and parents[0].source == parents[1].source and parents[0].id != parents[1].id
    alone = Population(size=6, rng=random.Random(0))
    for i, source in enumerate("ab"):
        alone.add(make_kernel(source, i, True, 1.0 + i))
    assert len(alone.select(2, same_source)[1]) == 1


def test_ring_migration_copies_the_best_to_the_next_island():
    population = Population(size=4, islands=2, migration_interval=5, migrants=1, rng=random.Random(0))
    for i, speed in enumerate([1.0, 2.0, 0.5, 0.6, 0.7, 0.8]):
        population.add(make_kernel("k", i, True, speed), island=0 if i < 2 else 1)
    assert not population.migrate_if_due(3)
    assert population.migrate_if_due(5)
    assert 1 in {k.id for k in population.islands[1]}  # island 0's best (2.0) arrived on island 1
