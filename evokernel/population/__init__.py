"""The population: DEAP individuals carrying kernel sources, a correctness-gated fitness, islands
with tournament selection, elitist steady-state replacement and ring migration, a hall of fame,
statistics and a logbook.

Interface: `Kernel` (the DEAP individual type), `make_kernel`, `gated_values`, `Population`.
"""

from evokernel.population.individual import Kernel, gated_values, make_kernel
from evokernel.population.population import Population

__all__ = ["Kernel", "Population", "gated_values", "make_kernel"]
