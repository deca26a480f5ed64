"""Islands of correct kernels under steady-state evolution.

Parents come from DEAP tournament selection on one island; a child joins its parents' island and,
when the island is full, pushes out the loser of a reverse tournament among the non-elite members,
so the `elitism` best of every island are never lost. Every `migration_interval` evaluations the
best `migrants` of each island are copied to the next one (DEAP ring migration, replacing the worst).
Rejected kernels never join: they have nothing to offer selection (the gated fitness ranks them last).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import numpy as np
from deap import tools

from evokernel.population.individual import Kernel

HALL_OF_FAME_SIZE = 10


class Population:
    def __init__(self, size: int, islands: int = 1, tournament_size: int = 3, elitism: int = 1,
                 migration_interval: int = 20, migrants: int = 1, rng: random.Random | None = None) -> None:
        self.size = size
        self.tournament_size = tournament_size
        self.elitism = elitism
        self.migration_interval = migration_interval
        self.migrants = migrants
        self.rng = rng or random.Random()
        self.islands: list[list[Kernel]] = [[] for _ in range(islands)]
        self.hall_of_fame = tools.HallOfFame(HALL_OF_FAME_SIZE, similar=lambda a, b: a.id == b.id)
        self.stats = tools.Statistics(key=lambda kernel: kernel.fitness.values[1])
        for name, function in (("best", np.max), ("mean", np.mean), ("worst", np.min)):
            self.stats.register(name, function)
        self.logbook = tools.Logbook()
        self.logbook.header = ["evaluations", "size", "best", "mean", "worst"]
        self._last_migration = 0

    def __len__(self) -> int:
        return sum(len(island) for island in self.islands)

    def __iter__(self) -> Iterator[Kernel]:
        seen: set[int] = set()
        for island in self.islands:
            for kernel in island:
                if kernel.id not in seen:
                    seen.add(kernel.id)
                    yield kernel

    def best(self) -> Kernel | None:
        return self.hall_of_fame[0] if len(self.hall_of_fame) else None

    def add(self, kernel: Kernel, island: int | None = None) -> bool:
        """Insert a correct kernel (rejected ones are refused); returns whether it joined."""
        if not kernel.fitness.valid or kernel.fitness.values[0] < 1.0:
            return False
        if island is None:  # seeds and resumed kernels: fill the smallest island
            island = min(range(len(self.islands)), key=lambda i: len(self.islands[i]))
        members = self.islands[island]
        members.append(kernel)
        self.hall_of_fame.update([kernel])
        if len(members) > self.size:
            members.remove(self._victim(members))
        return kernel in members

    def _victim(self, members: list[Kernel]) -> Kernel:
        ranked = sorted(members, key=lambda k: k.fitness, reverse=True)
        candidates = ranked[self.elitism:] or ranked[-1:]
        contenders = self.rng.sample(candidates, min(self.tournament_size, len(candidates)))
        return tools.selWorst(contenders, 1)[0]

    def select(self, count: int, mates: Callable[[Kernel, Kernel], bool] | None = None) -> tuple[int, list[Kernel]]:
        """`count` parents by tournament from one island (chosen at random among non-empty ones). Later
        parents differ from the first and, with `mates`, are ones it accepts with the first; fewer than
        `count` come back when the island holds none."""
        filled = [i for i, island in enumerate(self.islands) if island]
        if not filled:
            raise ValueError("the population is empty")
        island = self.rng.choice(filled)
        members = self.islands[island]
        parents = tools.selTournament(members, count, min(self.tournament_size, len(members)))
        first = parents[0]

        def fits(kernel: Kernel) -> bool:
            return kernel.id != first.id and (mates is None or mates(first, kernel))

        if not all(fits(p) for p in parents[1:]):
            others = [k for k in members if fits(k)]
            if not others:
                return island, [first]
            parents[1:] = tools.selTournament(others, count - 1, min(self.tournament_size, len(others)))
        return island, parents

    def migrate_if_due(self, evaluations: int) -> bool:
        """Ring migration every `migration_interval` evaluations (islands > 1)."""
        if len(self.islands) < 2 or evaluations - self._last_migration < self.migration_interval:
            return False
        self._last_migration = evaluations
        if all(len(island) > self.migrants for island in self.islands):
            tools.migRing(self.islands, self.migrants, tools.selBest, replacement=tools.selWorst)
            return True
        return False

    def record(self, evaluations: int) -> dict:
        """A logbook entry for the current population."""
        members = list(self)
        entry = {name: float(value) for name, value in self.stats.compile(members).items()} if members else {}
        self.logbook.record(evaluations=evaluations, size=len(members), **entry)
        return self.logbook[-1]
