#!/usr/bin/env python3
"""How repeatable the CPU task's timing is: the original kernel checked against itself several times on
every scenario; the range of the geomeans and the median per-scenario spread. Run it under different
OpenMP settings (environment) or with other load beside it to see what quiets the timing here.

    python benchmarks/cpu_timing_noise.py --rounds 7 --checks 5
    OMP_PROC_BIND=close OMP_PLACES=cores python benchmarks/cpu_timing_noise.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from evokernel.harness import CheckOptions, check_kernel, get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--checks", type=int, default=5)
    args = parser.parse_args()
    task = get_task("attention-fwd-cpu")
    geomeans, spreads = [], []
    started = time.perf_counter()
    for _ in range(args.checks):
        report = check_kernel(task.original, task, CheckOptions(scenario_set="all", rounds=args.rounds))
        if not report.correct:
            raise SystemExit(f"rejected: {report.failure}")
        geomeans.append(report.geomean_speedup)
        spreads += [s.spread for s in report.scenarios]
    settings = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("OMP_")) or "defaults"
    print(f"rounds {args.rounds}, OpenMP {settings}: geomeans {min(geomeans):.4f}-{max(geomeans):.4f} "
          f"(range {100 * (max(geomeans) / min(geomeans) - 1):.2f}%), median spread "
          f"{100 * statistics.median(spreads):.1f}%, {time.perf_counter() - started:.1f} s for {args.checks} checks")


if __name__ == "__main__":
    main()
