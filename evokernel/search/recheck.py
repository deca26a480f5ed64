"""When a child's gain must be measured again before it may count, and how (beside `retime`, which re-times
the best at the end): a child `suspicious_gain` times faster than its parent, or one the harness flagged
as faster than the roofline, is checked again with more trials, a fresh seed and the speed reference timed
interleaved; only that verdict may make it the best."""

from __future__ import annotations

import dataclasses
import random

from evokernel.bank import gain_ratio
from evokernel.config import TriggerConfig


def recheck_reason(parent_fitness: float | None, child_fitness: float | None, report,
                   config: TriggerConfig) -> str | None:
    """Why a correct child must be re-checked before it may become the best (None: it need not): it is
    `config.suspicious_gain` times faster than its parent, or the harness flagged a scenario as faster than
    the roofline. `report` is a CheckReport or its dict (or None)."""
    if child_fitness is None:
        return None
    ratio = gain_ratio(parent_fitness, child_fitness)
    flagged = report.get("suspicious") if isinstance(report, dict) else getattr(report, "suspicious", False)
    if ratio is not None and ratio >= config.suspicious_gain:
        return (f"{ratio:.2f}x its parent ({child_fitness:.3f} against {parent_fitness:.3f}; suspicious from "
                f"{config.suspicious_gain:g}x)")
    return "a scenario faster than the roofline" if flagged else None


def recheck_options(options, config: TriggerConfig, rng: random.Random):
    """CheckOptions for the re-check: at least `config.recheck_trials` trials, a seed never used before, and
    the speed reference timed interleaved."""
    seed = rng.randrange(1, 2 ** 31)
    while seed == options.seed:
        seed = rng.randrange(1, 2 ** 31)
    return dataclasses.replace(options, trials=max(options.trials, config.recheck_trials), seed=seed,
                               reference_reuse_s=None)
