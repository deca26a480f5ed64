"""Exhaustive knob table: every combination of a seed kernel's knobs checked by the harness, one CSV row each.

Why: comparing knob-search strategies (evokernel's operators, Kernel Tuner's) is only fair on identical
data, so the whole space is measured once and every search replays it (`benchmarks/knob_search_comparison.py`).
Rows are appended as they are measured, and a rerun skips combinations already in the file, so a table
too slow for one session (the CUDA seed in ten-minute device calls) is filled in several.

    python benchmarks/knob_table.py --task attention-fwd-cpu --scenarios grid \
        --out experiments/attention_cpu/knob_table.csv
    python benchmarks/knob_table.py --task attention-fwd --seed-kernel evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu \
        --scenarios fa3-2k --speed-reference cudnn --out experiments/attention_hopper/knob_table.csv \
        --fix ... --stop-after-s 540    # rerun until it says 0 to measure
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evokernel.harness import CheckOptions, check_source, get_task  # noqa: E402
from evokernel.harness.check import build_checked  # noqa: E402
from evokernel.source import parse_knobs, set_knobs  # noqa: E402

RESULT_COLUMNS = ["correct", "fitness", "spread", "failure", "check_s"]


def knob_space(source: str, fixed: dict[str, str]) -> tuple[list[str], list[dict[str, str]]]:
    """Knob names in source order and every combination of their values (a knob in `fixed` keeps one value)."""
    knobs = parse_knobs(source)
    for name, value in fixed.items():
        if name not in knobs or value not in knobs[name].values:
            raise SystemExit(f"--fix {name}={value}: not a knob value of the seed")
    names = list(knobs)
    choices = [[fixed[name]] if name in fixed else list(knobs[name].values) for name in names]
    return names, [dict(zip(names, combo)) for combo in itertools.product(*choices)]


def measured_keys(path: Path, names: list[str]) -> set[tuple[str, ...]]:
    """Combinations already in the table (a rerun continues where the last one stopped)."""
    if not path.is_file():
        return set()
    with path.open(newline="") as handle:
        return {tuple(row[name] for name in names) for row in csv.DictReader(handle)}


def median_spread(report: dict) -> float | None:
    """The median over scenarios of the candidate's timing spread (interquartile range / median)."""
    spreads = [s["spread"] for s in report.get("scenarios", []) if s.get("spread") is not None]
    return round(median(spreads), 5) if spreads else None


def measure(source: str, task: str, options: CheckOptions) -> dict:
    """One harness check of one combination, reduced to the table's result columns."""
    started = time.perf_counter()
    report = check_source(source, task, options, "knob-table").to_dict()
    fitness = report.get("geomean_speedup")
    return {"correct": int(bool(report["correct"])),
            "fitness": "" if fitness is None else round(fitness, 5),
            "spread": median_spread(report) if report["correct"] else "",
            "failure": (report.get("failure") or "").replace("\n", " ")[:200],
            "check_s": round(time.perf_counter() - started, 2)}


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="attention-fwd-cpu")
    parser.add_argument("--seed-kernel", type=Path, help="kernel with @knob lines (default: the task's original)")
    parser.add_argument("--scenarios", default="grid")
    parser.add_argument("--speed-reference", default="original",
                        help="what fitness is a speedup over (as `check --original`: original, a file, cudnn, ...)")
    parser.add_argument("--trials", type=int, default=1, help="verification trials per scenario")
    parser.add_argument("--rounds", type=int, help="timing rounds (default: the backend's)")
    parser.add_argument("--fix", action="append", default=[], metavar="KNOB=VALUE",
                        help="restrict the space: keep this knob at one value (repeatable)")
    parser.add_argument("--stop-after-s", type=float, help="stop starting new checks after this many seconds")
    parser.add_argument("--reference-reuse-s", type=float,
                        help="screen each combination against the speed reference's times from the last interleaved "
                             "check in this process at most this old (as a search does; faster, about 0.5%% off)")
    parser.add_argument("--build-jobs", type=int, default=1,
                        help="compile the combinations still to do this many at a time first (into the build cache)")
    parser.add_argument("--shard", default="1/1", metavar="K/N",
                        help="measure every N-th combination still to do, from the K-th (one process per GPU, "
                             "each with its own --out; concatenate the files after)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    task = get_task(args.task)
    seed_path = args.seed_kernel or task.original
    source = Path(seed_path).read_text()
    fixed = dict(item.split("=", 1) for item in args.fix)
    names, combos = knob_space(source, fixed)
    done = measured_keys(args.out, names)
    shard, shards = (int(x) for x in args.shard.split("/"))
    todo = [c for c in combos[shard - 1::shards] if tuple(c[n] for n in names) not in done]
    print(f"{len(combos)} combinations, {len(done)} already in {args.out}, {len(todo)} to measure", flush=True)
    options = CheckOptions(scenario_set=args.scenarios, speed_reference=args.speed_reference, trials=args.trials,
                           rounds=args.rounds, warm_worker=True, reference_reuse_s=args.reference_reuse_s)
    if args.build_jobs > 1:  # the checks then find every build in the cache
        with ThreadPoolExecutor(args.build_jobs) as pool:
            list(pool.map(lambda combo: build_checked(set_knobs(source, combo), task, "candidate"), todo))
        print(f"built {len(todo)} combinations, {args.build_jobs} at a time", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not args.out.is_file()
    started, loads = time.time(), [load_average()]
    with args.out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=names + RESULT_COLUMNS)
        if new_file:
            writer.writeheader()
        for index, combo in enumerate(todo, 1):
            if args.stop_after_s is not None and time.time() - started > args.stop_after_s:
                print(f"stopped after {args.stop_after_s:g} s; rerun the same command to continue", flush=True)
                break
            row = combo | measure(set_knobs(source, combo), args.task, options)
            writer.writerow(row)
            handle.flush()
            if index % 10 == 0:
                loads.append(load_average())
            print(f"[{index}/{len(todo)}] {combo} -> correct={row['correct']} fitness={row['fitness']} "
                  f"spread={row['spread']} ({row['check_s']} s)", flush=True)
    seed_shown = Path(seed_path).resolve()
    seed_shown = seed_shown.relative_to(ROOT) if seed_shown.is_relative_to(ROOT) else seed_shown
    meta = {"task": task.name, "seed_kernel": str(seed_shown), "scenarios": args.scenarios,
            "speed_reference": args.speed_reference, "trials": args.trials,
            "rounds": args.rounds, "fixed": fixed, "knobs": names, "space": len(combos),
            "finished_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)",
            "load_averages_1_5_15": loads, "seconds": round(time.time() - started, 1),
            "command": "python " + shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}
    meta_path = args.out.with_suffix(".meta.json")
    history = json.loads(meta_path.read_text()) if meta_path.is_file() else []
    meta_path.write_text(json.dumps(history + [meta], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
