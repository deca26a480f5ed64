"""How one kernel's timings compare with another's: per-scenario verdicts that respect the timing noise,
and the end-of-run re-timing of the best kernel against the seed."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from evokernel.store import Individual

MIN_NOISE = 0.01  # per-scenario changes below 1% are never called a win or a loss


@dataclass
class ScenarioDelta:
    """One scenario of a child against its parent (or of kernel B against kernel A)."""

    name: str
    before: float | None  # speedup over the task's original kernel
    after: float | None
    noise: float  # relative change below which neither side wins
    verdict: str  # win, loss, tie, broke, fixed, -

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before and self.after else None




def compare_scenarios(before: list[dict], after: list[dict]) -> list[ScenarioDelta]:
    """Per-scenario verdicts; a change within the larger timing spread (at least 1%) is a tie."""
    old = {row["name"]: row for row in before}
    deltas = []
    for row in after:
        prev = old.get(row["name"])
        a, b = (prev or {}).get("speedup"), row.get("speedup")
        noise = max(MIN_NOISE, (prev or {}).get("spread") or 0.0, row.get("spread") or 0.0)
        if prev is None:
            verdict = "-"
        elif prev["correct"] and not row["correct"]:
            verdict = "broke"
        elif row["correct"] and not prev["correct"]:
            verdict = "fixed"
        elif a and b:
            verdict = "win" if b / a > 1 + noise else "loss" if b / a < 1 / (1 + noise) else "tie"
        else:
            verdict = "-"
        deltas.append(ScenarioDelta(row["name"], a, b, noise, verdict))
    return deltas


def retime_record(report: dict, best: Individual, seed: Individual, rounds: int) -> dict:
    """What the end-of-run re-timing of the best kernel against the seed says (the run's meta keeps it).

    The gain stands when the interval the per-scenario spreads give the re-timed speedup lies above 1 and
    the re-timed geomean exceeds 1 + the median spread (at least MIN_NOISE); otherwise it is within noise.
    """
    rows = [s for s in report.get("scenarios", []) if s.get("speedup")]
    record = {"id": best.id, "seed_id": seed.id, "rounds": rounds, "at": time.time(),
              "search_ratio": best.fitness / seed.fitness if best.fitness and seed.fitness else None,
              "geomean": None, "low": None, "high": None, "median_spread": None, "verdict": "not confirmed",
              "failure": None, "scenarios": [{"name": s["name"], "speedup": s["speedup"], "spread": s.get("spread")}
                                             for s in rows]}
    if not report.get("correct") or not report.get("geomean_speedup") or not rows:
        record["failure"] = report.get("failure") or "no timing"
        return record
    spreads = [s.get("spread") or 0.0 for s in rows]
    speedups = [s["speedup"] for s in rows]
    geo = lambda values: math.exp(sum(math.log(v) for v in values) / len(values))  # noqa: E731
    low = geo([v / (1 + e) for v, e in zip(speedups, spreads)])
    high = geo([v * (1 + e) for v, e in zip(speedups, spreads)])
    median = statistics.median(spreads)
    geomean = report["geomean_speedup"]
    stands = low > 1.0 and geomean > 1.0 + max(MIN_NOISE, median)
    record.update(geomean=geomean, low=low, high=high, median_spread=median,
                  verdict="gain" if stands else "within noise")
    return record


def describe_retime(record: dict) -> str:
    """The re-timing in one line, e.g. "re-timed against seed #1 (21 rounds): 1.012x (interval 0.871-1.176
    from the per-scenario spreads, median 14.0%): within noise"."""
    head = f"re-timed against seed #{record['seed_id']} ({record['rounds']} rounds)"
    if record.get("failure"):
        return f"{head}: {record['failure']}: the gain is not confirmed"
    verdict = ("a gain beyond the noise" if record["verdict"] == "gain"
               else "within noise: the gain over the seed does not stand")
    return (f"{head}: {record['geomean']:.3f}x (interval {record['low']:.3f}-{record['high']:.3f} from the "
            f"per-scenario spreads, median {100 * record['median_spread']:.1f}%): {verdict}")

