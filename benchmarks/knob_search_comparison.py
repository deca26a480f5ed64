"""How close knob searches get to the best kernel for a given number of evaluations, on a recorded knob table.

Why: every evaluation costs a device for seconds, so a search is judged by best-found / optimum per
evaluation spent. Every strategy replays the same exhaustive table (`benchmarks/knob_table.py`):
- evokernel: the real `Search` (its configured DEAP population, the registered `knob-mutation` and
  `knob-crossover` operators, duplicate skipping by normalized hash) with the `replay` evaluator, which
  serves each kernel the table's verdict through a directory of check reports;
- Kernel Tuner's strategies through its own simulation mode, on a cache file in its documented format
  written from the same table (incorrect combinations are `RuntimeFailedConfig`, and count as evaluations
  as they do in evokernel).
Each Kernel Tuner (strategy, budget, repetition) is a separate search with its own random seed, so
strategies that scale their schedule to the budget (annealing) get the budget they are run with. evokernel's
search does not depend on its evaluation budget until it stops proposing, so one run per seed at the
largest budget gives every smaller budget as a prefix (`tests/test_knob_comparison.py` checks that).

    python benchmarks/knob_search_comparison.py --table experiments/attention_cpu/knob_table.csv \
        --repetitions 50 --plot experiments/attention_cpu/knob_search.png --results experiments/attention_cpu/RESULTS.md
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import platform
import random
import shlex
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evokernel.config import load_config, parse_config  # noqa: E402
from evokernel.harness import CheckReport, get_task  # noqa: E402
from evokernel.source import KNOB_LINE, parse_knobs, set_knobs  # noqa: E402
from evokernel.search import Search  # noqa: E402
from evokernel.store import Store  # noqa: E402

DEFAULT_BUDGETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
DEFAULT_KT_STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils", "mls",
                         "diff_evo", "pso", "firefly_algorithm", "dual_annealing", "bayes_opt")  # basinhopping: minutes
TARGETS = (0.95, 0.98)
EVOKERNEL = "evokernel"


@dataclass
class KnobTable:
    """A recorded knob space: the seed, its knobs (values as the table restricts them) and each combination's
    fitness (0 for an incorrect one)."""

    task: str
    scenarios: str
    speed_reference: str
    seed_source: str  # the seed kernel with its @knob lists cut to the table's values
    knobs: dict[str, list[str]]
    fitness: dict[tuple[str, ...], float]

    @property
    def size(self) -> int:
        return len(self.fitness)

    @property
    def optimum(self) -> float:
        return max(self.fitness.values())

    @classmethod
    def load(cls, path: Path, restrict: dict[str, list[str]] | None = None) -> "KnobTable":
        """The table at `path` (with `path.meta.json` beside it), optionally restricted to some knob values."""
        meta_path = path.with_suffix(".meta.json")
        if not meta_path.is_file():
            raise SystemExit(f"{meta_path} is missing (benchmarks/knob_table.py writes it when a run ends)")
        meta = json.loads(meta_path.read_text())[-1]
        task = get_task(meta["task"])
        seed_path = Path(meta["seed_kernel"])
        seed = (seed_path if seed_path.is_absolute() else ROOT / seed_path).read_text()
        declared = {name: list(knob.values) for name, knob in parse_knobs(seed).items()}
        restrict = restrict or {}
        with path.open(newline="") as handle:
            rows = [row for row in csv.DictReader(handle)
                    if all(row[name] in allowed for name, allowed in restrict.items())]
        knobs = {name: [v for v in values if any(row[name] == v for row in rows)] for name, values in declared.items()}
        measured: dict[tuple[str, ...], list[dict]] = {}
        for row in rows:
            measured.setdefault(tuple(row[name] for name in knobs), []).append(row)
        missing = math.prod(len(v) for v in knobs.values()) - len(measured)
        if missing:
            raise SystemExit(f"{path}: {missing} combinations of {knobs} are not in the table (not exhaustive)")
        fitness = {combination: combined_fitness(repeats) for combination, repeats in measured.items()}
        seed_knobs = {name: k.value for name, k in parse_knobs(seed).items()}
        start = {name: seed_knobs[name] if seed_knobs[name] in knobs[name] else knobs[name][0] for name in knobs}
        return cls(task.name, meta["scenarios"], meta.get("speed_reference", "original"), restricted_knob_lists(set_knobs(seed, start), knobs), knobs, fitness)

    def source(self, combination: tuple[str, ...]) -> str:
        return set_knobs(self.seed_source, dict(zip(self.knobs, combination)))


def combined_fitness(repeats: list[dict]) -> float:
    """One combination's fitness from its rows: 0 when any measurement found it incorrect, else the geometric
    mean of the measured speedups (a table may hold repeated measurements of a combination)."""
    if any(row["correct"] != "1" for row in repeats):
        return 0.0
    return math.exp(sum(math.log(float(row["fitness"])) for row in repeats) / len(repeats))


def restricted_knob_lists(source: str, knobs: dict[str, list[str]]) -> str:
    """The source with each @knob list replaced by `knobs[name]` (comments only: the kernel is unchanged)."""
    def replace(match) -> str:
        tail = match["tail"][: match.start("values") - match.start("tail")]
        return f"{match['head']}{match['value']}{tail}{','.join(knobs[match['name']])}"

    return KNOB_LINE.sub(replace, source)


# -- evokernel ------------------------------------------------------------------------------------------

def write_replay_reports(table: KnobTable, directory: Path) -> Path:
    """Every combination as a kernel file beside a check report with the table's verdict (what the replay
    evaluator serves); a kernel outside the table is rejected by it as never recorded."""
    directory.mkdir(parents=True, exist_ok=True)
    suffix = Path(get_task(table.task).original).suffix
    for index, (combination, fitness) in enumerate(table.fitness.items()):
        (directory / f"k{index}{suffix}").write_text(table.source(combination))
        report = CheckReport(task=table.task, kernel=f"k{index}", scenario_set=table.scenarios,
                             speed_reference=table.speed_reference,
                             correct=fitness > 0, geomean_speedup=fitness if fitness > 0 else None,
                             failure=None if fitness > 0 else "incorrect in the knob table")
        (directory / f"k{index}.json").write_text(report.to_json())
    return directory


class EvokernelSearch:
    """evokernel's knob search as `evokernel run` makes it, on the replayed table."""

    def __init__(self, table: KnobTable, config_path: Path, workdir: Path) -> None:
        self.table = table
        self.workdir = workdir
        self.reports = write_replay_reports(table, workdir / "reports")
        self.seed_path = workdir / f"seed{Path(get_task(table.task).original).suffix}"
        self.seed_path.write_text(table.seed_source)
        self.base = load_config(config_path).model_dump(mode="json")
        self.runs = 0
        self.wasted: list[int] = []  # per run: proposals dropped as duplicates or failed
        self.stopped_early: list[str] = []  # per run that ended before its budget: why

    def trajectories(self, budgets: list[int], seed: int) -> dict[int, list[float]]:
        """Each budget's trajectory: the prefix of one run at the largest budget."""
        run = self.run(max(budgets), seed)
        return {budget: run[:budget] for budget in budgets}

    def run(self, budget: int, seed: int) -> list[float]:
        """Fitness of each evaluation in the order the search finished them."""
        self.runs += 1
        data = {**self.base, "task": self.table.task, "scenarios": self.table.scenarios,
                "speed_reference": self.table.speed_reference, "seeds": [str(self.seed_path)], "random_seed": seed,
                "operators": {name: weight for name, weight in self.base["operators"].items() if "knob" in name},
                "llm": {**self.base["llm"], "models": []},
                "budget": {"evaluations": budget, "wall_time_s": None, "usd": None},
                "resources": {**self.base["resources"], "evaluator": "replay",
                              "replay_evaluations": str(self.reports)}}
        config = parse_config(data, "knob comparison")
        run_dir = self.workdir / f"run{self.runs}"
        result = Search(config, run_dir, retime_best=False).run()
        self.wasted.append(result.stats.duplicates + sum(result.stats.proposal_failures.values()))
        if result.stats.evaluations < budget:
            self.stopped_early.append(result.reason)
        with Store(run_dir, readonly=True) as store:
            rows = [row for row in store.individuals() if row.status in ("correct", "rejected")]
        rows.sort(key=lambda row: (row.finished_at or 0, row.id))
        return [row.fitness if row.status == "correct" and row.fitness else 0.0 for row in rows]


# -- Kernel Tuner ---------------------------------------------------------------------------------------

def write_kernel_tuner_cache(table: KnobTable, path: Path) -> Path:
    """The table as a Kernel Tuner cache file (the format its `cache=` option writes and simulation mode reads)."""
    params = {name: [int(v) if v.lstrip("-").isdigit() else v for v in values] for name, values in table.knobs.items()}
    entries = {}
    for combination, fitness in table.fitness.items():
        config = {name: params[name][table.knobs[name].index(v)] for name, v in zip(table.knobs, combination)}
        key = ",".join(str(config[name]) for name in table.knobs)
        entries[key] = {**config, "fitness": fitness if fitness > 0 else "RuntimeFailedConfig",
                        "compile_time": 0, "verification_time": 0, "benchmark_time": 0, "strategy_time": 0,
                        "framework_time": 0, "timestamp": "2026-11-30 00:00:00"}
    path.write_text(json.dumps({"device_name": "knob-table", "kernel_name": "evk_attention_fwd",
                                "problem_size": [1], "tune_params_keys": list(params), "tune_params": params,
                                "objective": "fitness", "cache": entries}))
    return path


class KernelTunerSearch:
    """One of Kernel Tuner's strategies in simulation mode on the table's cache file."""

    def __init__(self, table: KnobTable, strategy: str, cache: Path) -> None:
        import kernel_tuner

        self.tune_kernel = kernel_tuner.tune_kernel
        self.table, self.strategy, self.cache = table, strategy, cache
        self.params = json.loads(cache.read_text())["tune_params"]
        self.crashes: dict[int, int] = {}  # budget -> runs in which the strategy raised (they found nothing)

    def trajectories(self, budgets: list[int], seed: int) -> dict[int, list[float]]:
        return {budget: self.run(budget, seed) for budget in budgets}

    def run(self, budget: int, seed: int) -> list[float]:
        random.seed(seed)
        np.random.seed(seed)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            try:
                results, _ = self.tune_kernel(
                    "evk_attention_fwd", "/* replayed from the knob table */", 1, [], self.params,
                    strategy=self.strategy, strategy_options={"max_fevals": budget}, cache=str(self.cache),
                    simulation_mode=True, objective="fitness", objective_higher_is_better=True, quiet=True,
                    verbose=False)
            except Exception:  # a strategy's own failure (diff_evo on a small budget): it found nothing
                self.crashes[budget] = self.crashes.get(budget, 0) + 1
                return []
        seen: dict[str, float] = {}
        for result in results:
            key = ",".join(str(result[name]) for name in self.params)
            if key not in seen:
                value = result.get("fitness")
                seen[key] = value if isinstance(value, (int, float)) and "__error__" not in result else 0.0
        return list(seen.values())[:budget]


# -- summary --------------------------------------------------------------------------------------------

def evaluations_to_reach(trajectory: list[float], level: float) -> int | None:
    """1-based number of evaluations after which the best found is at least `level` (None: never)."""
    best = 0.0
    for count, value in enumerate(trajectory, 1):
        best = max(best, value)
        if best >= level:
            return count
    return None


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return float(q1), float(q2), float(q3)


def median_reach(counts: list[int | None]) -> str:
    """Median evaluations to reach a target over repetitions (unreached counted as never); 'never' when the
    median repetition did not reach it."""
    ranked = sorted(math.inf if c is None else c for c in counts)
    value = float(np.median(ranked))
    return "never" if math.isinf(value) else f"{value:g}"


def summarize(table: KnobTable, trajectories: dict[str, dict[int, list[list[float]]]]) -> list[dict]:
    """Per strategy and budget: quartiles of best-found / optimum, and evaluations to reach each target
    (median over repetitions, from the runs at that budget)."""
    rows = []
    for strategy, by_budget in trajectories.items():
        for budget, runs in sorted(by_budget.items()):
            ratios = [max(run, default=0.0) / table.optimum for run in runs]
            q1, median, q3 = quartiles(ratios)
            row = {"strategy": strategy, "budget": budget, "budget_fraction": budget / table.size,
                   "repetitions": len(runs), "median": median, "q1": q1, "q3": q3,
                   "evaluations_used": float(np.median([len(run) for run in runs]))}
            for target in TARGETS:
                counts = [evaluations_to_reach(run, target * table.optimum) for run in runs]
                row[f"reach_{round(target * 100)}"] = median_reach(counts)
                row[f"reached_{round(target * 100)}"] = sum(c is not None for c in counts) / len(counts)
            rows.append(row)
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = ["| strategy | budget | evals used (median) | best/optimum median | IQR | evals to 95% | reached 95% "
             "| evals to 98% | reached 98% |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['strategy']} | {r['budget']} ({r['budget_fraction']:.0%}) | {r['evaluations_used']:g} "
                     f"| {r['median']:.3f} | {r['q1']:.3f}-{r['q3']:.3f} | {r['reach_95']} | {r['reached_95']:.0%} "
                     f"| {r['reach_98']} | {r['reached_98']:.0%} |")
    return "\n".join(lines)


def plot(rows: list[dict], table: KnobTable, path: Path, title: str) -> None:
    """Median best-found / optimum against budget, with the interquartile range shaded, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        x = [100 * r["budget_fraction"] for r in mine]
        ours = strategy == EVOKERNEL  # drawn in black on top; the colour cycle is left to the others
        line, = axes.plot(x, [r["median"] for r in mine], marker="o", linewidth=2.6 if ours else 1.1,
                          label=strategy, zorder=3 if ours else 2, **({"color": "black"} if ours else {}))
        axes.fill_between(x, [r["q1"] for r in mine], [r["q3"] for r in mine], color=line.get_color(),
                          alpha=0.15 if ours else 0.05)
    for target in TARGETS:
        axes.axhline(target, color="grey", linestyle=":", linewidth=0.8)
    axes.set_xlabel(f"budget (% of the {table.size} combinations evaluated)")
    axes.set_ylabel("best found / optimum (median, IQR shaded)")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="lower right")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# -- main -----------------------------------------------------------------------------------------------

def compare(table: KnobTable, budgets: list[int], repetitions: int, kt_strategies: list[str], config_path: Path,
            workdir: Path, first_seed: int = 0) -> tuple[dict[str, dict[int, list[list[float]]]], str]:
    """Trajectories per strategy, budget and repetition (seeds first_seed .. first_seed + repetitions - 1), and a
    line on evokernel's wasted proposals."""
    evokernel = EvokernelSearch(table, config_path, workdir)
    searches: dict[str, object] = {EVOKERNEL: evokernel}
    if kt_strategies:
        cache = write_kernel_tuner_cache(table, workdir / "kernel_tuner_cache.json")
        searches |= {f"kt:{name}": KernelTunerSearch(table, name, cache) for name in kt_strategies}
    found: dict[str, dict[int, list[list[float]]]] = {}
    for name, search in searches.items():
        started = time.perf_counter()
        runs = [search.trajectories(budgets, first_seed + rep) for rep in range(repetitions)]
        found[name] = {budget: [run[budget] for run in runs] for budget in budgets}
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    crashed = [f"{name} raised in {sum(search.crashes.values())} runs (budgets "
               f"{', '.join(map(str, sorted(search.crashes)))}; counted as finding nothing)"
               for name, search in searches.items() if getattr(search, "crashes", None)]
    reasons = sorted(set(evokernel.stopped_early))
    waste = (f"evokernel at budget {max(budgets)}: {np.median(evokernel.wasted):g} proposals dropped per run "
             f"(median; duplicates of known kernels or failed), {len(evokernel.stopped_early)} of {evokernel.runs} "
             f"runs ended before the budget" + (f" ({'; '.join(reasons)})" if reasons else "")
             + "".join(f"; {line}" for line in crashed))
    return found, waste


def parse_restrict(items: list[str]) -> dict[str, list[str]]:
    return {name: values.split(",") for name, values in (item.split("=", 1) for item in items)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, required=True, help="CSV of benchmarks/knob_table.py")
    parser.add_argument("--restrict", action="append", default=[], metavar="KNOB=V1,V2",
                        help="use only these values of a knob (a smaller space; repeatable)")
    parser.add_argument("--config", type=Path, default=ROOT / "experiments/attention_cpu/config.yaml",
                        help="evokernel run config whose population, selection and knob operator weights are used")
    parser.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)),
                        help="fractions of the space, comma-separated")
    parser.add_argument("--repetitions", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--kernel-tuner", default=",".join(DEFAULT_KT_STRATEGIES),
                        help="Kernel Tuner strategies, comma-separated ('' for none)")
    parser.add_argument("--label", default="", help="said in the results heading (e.g. what changed)")
    parser.add_argument("--json", type=Path, help="write the summary rows here")
    parser.add_argument("--plot", type=Path, help="write a PNG plot here")
    parser.add_argument("--results", type=Path, help="append a section to this RESULTS.md")
    args = parser.parse_args(argv)

    table = KnobTable.load(args.table, parse_restrict(args.restrict))
    budgets = sorted({max(1, round(float(f) * table.size)) for f in args.budgets.split(",")})
    kt = [s for s in args.kernel_tuner.split(",") if s]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="knob-comparison-") as workdir:
        trajectories, waste = compare(table, budgets, args.repetitions, kt, args.config, Path(workdir),
                                      args.first_seed)
    rows = summarize(table, trajectories)
    seconds = time.perf_counter() - started
    text = markdown_table(rows) + "\n\n" + waste
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"space": table.size, "optimum": table.optimum, "rows": rows}, indent=1))
    title = (f"{table.task} '{table.scenarios}', {table.size} combinations, {args.repetitions} seeds"
             + (f" ({args.label})" if args.label else ""))
    if args.plot:
        plot(rows, table, args.plot, title)
    if args.results:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = "python " + shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
        section = [f"\n## Knob search against Kernel Tuner's strategies, {stamp}" + (f" ({args.label})" if args.label
                                                                                    else ""),
                   "", f"Machine: {platform.node()} ({platform.machine()}, {os.cpu_count()} cores)  ",
                   f"Table: `{args.table}` ({table.size} combinations, optimum {table.optimum:.4f}, "
                   f"{sum(v == 0 for v in table.fitness.values())} incorrect)  ",
                   f"Command: `{command}` ({seconds:.0f} s)", "", text, ""]
        with args.results.open("a") as handle:
            handle.write("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
