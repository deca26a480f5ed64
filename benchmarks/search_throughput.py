#!/usr/bin/env python3
"""Search throughput: how much the driver costs per evaluation, and whether the evaluation workers
stay busy when proposals come from a slow source (an LLM takes 10-30 s per answer).

Two runs of `evokernel.search.Search` on a real task (attention-fwd on a GPU machine, else
attention-fwd-cpu), each from the task's original kernel (or --seed):
1. fast source: children are made instantly (a new variant of the parent per proposal). Reports
   evaluations per minute and the driver's time outside waiting, per evaluation.
2. slow source: every proposal sleeps a uniform random latency in --latency (seconds, times
   --latency-scale) in the proposal thread pool, like an LLM call. Reports the fraction of time
   the evaluation workers were busy, overall and in steady state (after the first proposal arrived).

Each child is unique code (a distinct constant), so every evaluation builds and checks a new kernel.
Children are copies of the seed, as fast as the best: each is timed interleaved with the speed reference
after its screening (the slowest case of a search). With --faster-seed, that kernel is a second seed and
children are still copies of --seed: far below the best, they are screened only (the common case).

    python benchmarks/search_throughput.py --results experiments/attention_hopper/RESULTS.md
    python benchmarks/search_throughput.py --latency-scale 0.1 --results experiments/attention_cpu/RESULTS.md
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from evokernel.config import parse_config
from evokernel.evaluation import detect_gpus
from evokernel.evaluation.ray_pool import connect
from evokernel.harness import get_task
from evokernel.mutations import Proposal
from evokernel.search import Search
from evokernel.store import Store
from results_entry import append_entry

console = Console()
_variants = itertools.count(1)


class Variant:
    """A child that differs from its parent by one unused constant: a new kernel, made instantly."""

    name, arity, uses_llm = "variant", 1, False

    def __init__(self, base: str | None = None) -> None:
        self.base = base  # the source children copy (default: their parent's)

    def __call__(self, parents, context) -> Proposal:
        n = next(_variants)
        source = (self.base or parents[0].source) + f"\nstatic const int evk_benchmark_variant_{n} = {n};\n"
        return Proposal(source=source, operator=self.name, parent_ids=[parents[0].id])


class SlowVariant(Variant):
    """The same child after an LLM-like latency (runs in the search's proposal threads)."""

    name, uses_llm = "slow-variant", True

    def __init__(self, low: float, high: float, base: str | None = None) -> None:
        super().__init__(base)
        self.low, self.high = low, high

    def __call__(self, parents, context) -> Proposal:
        time.sleep(context.rng.uniform(self.low, self.high))
        return super().__call__(parents, context)


def steady_state(run_dir: Path, slots: int) -> tuple[float | None, float | None]:
    """From the first child's start to the last finish (the seeds excluded): the slots' busy share, and
    children evaluated per minute."""
    with Store(run_dir, readonly=True) as store:
        rows = [r for r in store.individuals() if r.operator != "seed" and r.finished_at and r.started_at]
    span = max(r.finished_at for r in rows) - min(r.started_at for r in rows) if rows else 0
    if span <= 0:
        return None, None
    return sum(r.finished_at - r.started_at for r in rows) / (span * slots), 60 * len(rows) / span


def run_edges(run_dir: Path, started: float, ended: float) -> dict[str, float | None]:
    """Where a whole run's time goes outside its children: from the search's start to the first child's start
    (worker start-up and the seeds' checks, timed in full against the speed reference), the seeds' own checks,
    and from the last child's finish to the run's end."""
    with Store(run_dir, readonly=True) as store:
        rows = [r for r in store.individuals() if r.started_at and r.finished_at]
    children = [r for r in rows if r.operator != "seed"]
    seeds = [r.eval_seconds or 0.0 for r in rows if r.operator == "seed"]
    return {"before children s": min(r.started_at for r in children) - started if children else None,
            "seeds s": sum(seeds) if seeds else None,
            "after children s": ended - max(r.finished_at for r in children) if children else None}


def phase_medians(run_dir: Path) -> dict[str, float | None]:
    """Medians over the children's check reports: worker start (what the check waited for its worker,
    device context included), its device context alone (0 when made before the request), worker end (its
    processes taken down after the last message), verification,
    timing, and the time of an evaluation outside those two (build, worker start, the parent's checks,
    the driver)."""
    starts, ends, devices, verification, timing, outside, requests, checks = [], [], [], [], [], [], [], []
    with Store(run_dir, readonly=True) as store:
        for row in store.individuals():
            report = row.report if row.operator != "seed" else None
            phases = (report or {}).get("phase_seconds") or {}
            if "worker start" in phases and row.eval_seconds:
                devices.append(phases.get("device start", 0.0))
                starts.append(phases["worker start"] + devices[-1])
                ends.append(phases.get("worker end", 0.0))
                verification.append(phases.get("verification", 0.0))
                timing.append(phases.get("timing", 0.0))
                requests.append(phases.get("timing: requests", 0.0))  # parts of the timing (see `check`)
                checks.append(phases.get("timing: checks", 0.0))
                outside.append(row.eval_seconds - verification[-1] - timing[-1])
    columns = {"worker start s": starts, "device start s": devices, "worker end s": ends,
               "verification s": verification,
               "timing s": timing, "of which requests s": requests, "of which checks s": checks,
               "outside checks s": outside}
    return {name: statistics.median(values) if values else None for name, values in columns.items()}


def screened_share(run_dir: Path) -> float | None:
    """Share of the children's checks that were screened only (speed-reference times reused)."""
    with Store(run_dir, readonly=True) as store:
        reports = [store.individual(row.id).report for row in store.individuals() if row.operator != "seed"]
    reports = [r for r in reports if r and r.get("correct")]
    return sum(bool(r.get("reference_reused")) for r in reports) / len(reports) if reports else None


def run_once(args, operator, evaluations: int, concurrency: int, slots: int, runs_dir: Path, label: str) -> dict:
    data = {"task": args.task, "scenarios": args.scenarios, "trials": args.trials,
            "speed_reference": args.speed_reference,
            "population_size": 8, "budget": {"evaluations": evaluations},
            "llm": {"max_concurrent": concurrency}, "random_seed": args.random_seed,
            "resources": {"max_parallel": slots, "evaluation_timeout_s": 600}}
    if args.seed:
        data["seeds"] = [str(Path(args.seed).resolve())]
    if args.faster_seed:
        data["seeds"] = data.get("seeds", [str(get_task(args.task).original)]) + [str(args.faster_seed.resolve())]
    config = parse_config(data, "benchmark")
    run_dir = runs_dir / f"{label} {slots} slots"
    started = time.time()
    result = Search(config, run_dir, operator_set={operator.name: (operator, 1.0)}, retime_best=False).run()
    ended = time.time()
    wall = ended - started
    stats = result.stats
    busy_steady, per_minute_steady = steady_state(run_dir, stats.slots)
    with Store(run_dir, readonly=True) as store:
        for row in store.individuals():
            if row.failure:
                console.print(f"[yellow]{label}: #{row.id} rejected[/]: {row.failure}", soft_wrap=True)
    return {
        "source": label, "evaluations": stats.evaluations, "slots": stats.slots,
        "evals/min": 60 * stats.evaluations / wall if wall else None,
        "evals/min/slot": 60 * stats.evaluations / wall / stats.slots if wall else None,
        "driver ms/eval": 1e3 * stats.overhead_per_evaluation_s if stats.overhead_per_evaluation_s else None,
        "busy (all)": stats.busy_fraction,
        "busy (steady)": busy_steady, "evals/min (steady)": per_minute_steady,
        "rejected": sum(stats.failures.values()), "screened": screened_share(run_dir), "wall s": wall,
        **run_edges(run_dir, started, ended),
        **phase_medians(run_dir),
    }


def scaling_lines(frame: pd.DataFrame) -> list[str]:
    """Per source: evaluations per minute with more slots, as a multiple of the fewest slots' (same run)."""
    lines = []
    for source, group in frame.groupby("source", sort=False):
        group = group.sort_values("slots")
        if len(group) > 1 and group["evals/min"].iloc[0]:
            base = group.iloc[0]
            lines += [f"{source}: {row.slots} slots give {row['evals/min'] / base['evals/min']:.2f}x the evaluations "
                      f"per minute of {base.slots}" for _, row in group.iloc[1:].iterrows()]
    return lines


def machine() -> str:
    gpu = ""
    if detect_gpus():
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, check=False).stdout.strip().splitlines()
        # the uuid names the machine: the same benchmark's steady state differs by 30% between H200s
        uuids = ", ".join(line.split(",")[-1].strip().removeprefix("GPU-")[:8] for line in out)
        gpu = f", {len(out)}x {out[0].split(',')[0]} (uuid {uuids})" if out else ""
    return f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu})"


def fmt(value, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


FORMATS = {"worker start s": ".2f", "device start s": ".2f", "worker end s": ".2f",
           "verification s": ".2f", "timing s": ".2f",
           "of which requests s": ".2f", "of which checks s": ".2f", "outside checks s": ".2f", "evals/min": ".1f",
           "evals/min/slot": ".1f", "evals/min (steady)": ".1f", "screened": ".0%", "driver ms/eval": ".1f", "busy (all)": ".1%", "busy (steady)": ".1%",
           "wall s": ".1f", "before children s": ".1f", "seeds s": ".1f", "after children s": ".1f"}


def show(frame: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(column, justify="left" if column == "source" else "right")
    for _, row in frame.iterrows():
        table.add_row(*[fmt(row[c], FORMATS[c]) if c in FORMATS else str(row[c]) for c in frame.columns])
    console.print(table)


def markdown(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(fmt(row[c], FORMATS[c]) if c in FORMATS else str(row[c])
                                       for c in frame.columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", help="default: attention-fwd with a GPU, else attention-fwd-cpu")
    parser.add_argument("--seed", help="seed kernel (default: the task's original)")
    parser.add_argument("--faster-seed", type=Path, help="a faster second seed: children (copies of --seed) are far "
                        "below the best")
    parser.add_argument("--scenarios", default="quick")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--speed-reference", default="original", help="original, a kernel file, cudnn, flash")
    parser.add_argument("--evaluations", type=int, default=30, help="evaluations per slot with the fast source")
    parser.add_argument("--slow-evaluations", type=int, default=30, help="evaluations per slot with the slow source")
    parser.add_argument("--latency", default="10,30", help="LLM-like latency range in seconds: LOW,HIGH")
    parser.add_argument("--latency-scale", type=float, default=1.0, help="multiply the latency (quick local runs)")
    parser.add_argument("--concurrency", type=int, default=8, help="proposals generated at once (llm.max_concurrent)")
    parser.add_argument("--max-parallel", default="", help="evaluation slots, or several counts to compare in one "
                        "run (e.g. 1,2); default: one per GPU, or 1 on CPU")
    parser.add_argument("--random-seed", type=int, default=0)
    parser.add_argument("--runs-dir", type=Path, help="keep the benchmark runs here (default: a temp dir)")
    parser.add_argument("--results", type=Path, help="append the figures to this RESULTS.md")
    args = parser.parse_args()
    try:
        low, high = (float(x) * args.latency_scale for x in args.latency.split(","))
        slot_counts = [int(n) for n in args.max_parallel.split(",") if n.strip()] or [None]
    except ValueError:
        parser.exit(2, f"error: --latency takes LOW,HIGH and --max-parallel counts such as 1,2 (got "
                       f"'{args.latency}' and '{args.max_parallel}')\n")
    if min(args.evaluations, args.slow_evaluations) < 0 or args.evaluations + args.slow_evaluations == 0 \
            or any(n is not None and n < 1 for n in slot_counts):
        parser.exit(2, "error: --evaluations and --slow-evaluations are 0 or more, not both 0; --max-parallel "
                       "counts are 1 or more\n")
    args.task = args.task or ("attention-fwd" if detect_gpus() else "attention-fwd-cpu")
    random.seed(args.random_seed)

    connect(None)
    rows = []
    with tempfile.TemporaryDirectory(prefix="evk-bench-") as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        for slots in slot_counts:
            per_slot = slots or max(1, detect_gpus())
            base = Path(args.seed or get_task(args.task).original).read_text() if args.faster_seed else None
            if args.evaluations:
                rows.append(run_once(args, Variant(base), args.evaluations * per_slot, args.concurrency, slots,
                                     runs_dir, "fast"))
            if args.slow_evaluations:
                rows.append(run_once(args, SlowVariant(low, high, base), args.slow_evaluations * per_slot,
                                     args.concurrency, slots, runs_dir, f"slow {low:g}-{high:g} s x{args.concurrency}"))
    frame = pd.DataFrame(rows)
    title = f"search throughput · {args.task} · scenarios '{args.scenarios}'"
    show(frame, title)
    scaling = scaling_lines(frame)
    for line in scaling:
        console.print(line)
    if args.results:
        append_entry(args.results, "Search throughput", [
            f"Machine: {machine()}",
            f"Task: {args.task}, scenarios '{args.scenarios}', trials {args.trials}, speed reference "
            f"{args.speed_reference}; children {'far below the best (screened)' if args.faster_seed else 'as fast as the best'}",
        ], markdown(frame) + "".join(f"\n\n{line}" for line in scaling))
        console.print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
