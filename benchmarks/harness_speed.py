#!/usr/bin/env python3
"""Harness speed and repeatability: the build time of the task's original kernel from a cold cache,
the time of one full check of a kernel on a scenario set and where it goes (build, worker start,
verification, timing), and the same kernel checked again with new inputs: how far the geomeans differ.

Targets (attention-fwd on the H200): build under 10 s, an `fa3` check under 60 s, geomeans of two
checks within 1%.

    python benchmarks/harness_speed.py --scenarios fa3 --original cudnn --results experiments/attention_hopper/RESULTS.md
    python benchmarks/harness_speed.py --task attention-fwd-cpu --scenarios all
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

from rich.console import Console

from evokernel.builtin_tasks import ATTENTION_SEEDS
from evokernel.evaluation import detect_gpus
from evokernel.harness import CheckOptions, CheckReport, check_kernel, get_task
from evokernel.harness.build import build
from results_entry import append_entry

console = Console()


def cold_build_seconds(source: str, task) -> float:
    """Compile time with an empty build cache (the cache is pointed at a fresh directory meanwhile)."""
    with tempfile.TemporaryDirectory(prefix="evk-cold-cache-") as cache, \
            mock.patch.dict(os.environ, {"EVOKERNEL_CACHE": cache}):
        result = build(source, task.language, task.header)
    if not result.ok:
        raise SystemExit(f"build failed:\n{result.log[-2000:]}")
    return result.seconds


def largest_scenario_difference(first: CheckReport, second: CheckReport) -> tuple[str, float]:
    """The scenario whose speedup moved most between the two checks, and by how much (relative)."""
    pairs = [(a.name, b.speedup / a.speedup - 1) for a, b in zip(first.scenarios, second.scenarios)
             if a.speedup and b.speedup]
    return max(pairs, key=lambda pair: abs(pair[1]), default=("-", float("nan")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", help="default: attention-fwd with a GPU, else attention-fwd-cpu")
    parser.add_argument("--kernel", type=Path, help="default: the seed kernel on a GPU, else the task's original")
    parser.add_argument("--scenarios", default="fa3")
    parser.add_argument("--original", default="original", help="speed reference: original, a kernel file, cudnn, flash")
    parser.add_argument("--repeats", type=int, default=2, help="full checks of the kernel (at least 2)")
    parser.add_argument("--results", type=Path, help="append the figures to this RESULTS.md")
    args = parser.parse_args()
    task = get_task(args.task or ("attention-fwd" if detect_gpus() else "attention-fwd-cpu"))
    kernel = args.kernel or (ATTENTION_SEEDS / "attention_fa2.cu" if task.language == "cuda" else task.original)
    if args.repeats < 2:
        parser.error("--repeats must be at least 2")

    lines = [f"- build of the original kernel, cold cache: {cold_build_seconds(task.original.read_text(), task):.1f} s"]
    if kernel != task.original:
        lines.append(f"- build of {kernel.name}, cold cache: {cold_build_seconds(kernel.read_text(), task):.1f} s")
    console.print("\n".join(lines))
    reports = []
    for repeat in range(args.repeats):
        report = check_kernel(kernel, task, CheckOptions(scenario_set=args.scenarios, speed_reference=args.original))
        if not report.correct:
            console.print(f"[red]rejected[/]: {report.failure}")
            return 1
        lines.append(f"- check {repeat + 1} ({len(report.scenarios)} scenarios, seed {report.seed}): "
                     f"{report.check_seconds:.1f} s ({report.phase_summary()}); geomean speedup {report.geomean_speedup:.4f}")
        console.print(lines[-1])
        reports.append(report)
    geomeans = [r.geomean_speedup for r in reports]
    name, moved = largest_scenario_difference(reports[0], reports[1])
    lines.append(f"- repeatability: geomeans differ by {100 * (max(geomeans) / min(geomeans) - 1):.2f}% "
                 f"(largest single scenario: {name}, {100 * moved:+.1f}%)")
    console.print(lines[-1])
    if args.results:
        append_entry(args.results, "Harness speed and repeatability",
                     [f"Device: {reports[0].device}",
                      f"Kernel: {kernel.name} on '{args.scenarios}', speed reference {args.original}"], "\n".join(lines))
        console.print(f"appended to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
