#!/usr/bin/env python3
"""Baselines in one run: a kernel, the task's original kernel and the task's library baselines
(PyTorch SDPA cuDNN and flash, FA2) timed on the same scenarios in the same process, by the harness.

One `evokernel check` does it: the kernel is the candidate, the original is the speed reference,
the baselines are timed in the same interleaved rounds (L2 flushed before every launch, medians).
Prints TFLOP/s per scenario and the geomean of each against cuDNN; `--results` appends the table
with date, machine and command to a RESULTS.md.

    python benchmarks/attention_baselines.py --scenarios fa3 --results experiments/attention_hopper/RESULTS.md
    python benchmarks/attention_baselines.py --task attention-fwd-cpu --kernel my_kernel.c --scenarios all
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evokernel.builtin_tasks import ATTENTION_SEEDS
from evokernel.harness import CheckOptions, CheckReport, check_kernel, geomean, get_task
from results_entry import append_entry


def table(report: CheckReport, kernel_name: str) -> str:
    """Markdown: FLOP rate of every timed implementation per scenario, then geomeans against the first baseline."""
    task = get_task(report.task)
    flops = {s.name: task.flops(s) for s in task.scenarios(report.scenario_set)}
    columns = {f"kernel {kernel_name}": lambda s: s.time_ms, "original": lambda s: s.original_time_ms,
               **{name: (lambda s, n=name: s.baselines_ms.get(n)) for name in task.library_baselines}}
    rates = [[flops[s.name] / (time(s) * 1e-3) if time(s) else None for time in columns.values()]
             for s in report.scenarios]
    unit, scale = ("TFLOP/s", 1e12) if max(r for row in rates for r in row if r) > 1e12 else ("GFLOP/s", 1e9)
    lines = ["| scenario | " + " | ".join(f"{c} {unit}" for c in columns) + " |", "|---|" + "---|" * len(columns)]
    for s, row in zip(report.scenarios, rates):
        lines.append(f"| {s.name} | " + " | ".join("-" if r is None else f"{r / scale:.1f}" for r in row) + " |")
    if task.library_baselines:
        bar = task.library_baselines[0]
        lines += ["", f"Geomean time ratio against {bar} (higher is faster), over the scenarios {bar} supports:", ""]
        for name, time in columns.items():
            ratios = [s.baselines_ms[bar] / time(s) for s in report.scenarios if s.baselines_ms.get(bar) and time(s)]
            value = geomean(ratios)
            lines.append(f"- {name}: {'-' if value is None else f'{value:.3f}'}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="attention-fwd")
    parser.add_argument("--kernel", type=Path, default=ATTENTION_SEEDS / "attention_fa2.cu")
    parser.add_argument("--scenarios", default="fa3")
    parser.add_argument("--rounds", type=int, help="timing rounds (default: the harness's, fewer for slow kernels)")
    parser.add_argument("--json", type=Path, help="also write the harness report")
    parser.add_argument("--results", type=Path, help="append the table to this RESULTS.md")
    args = parser.parse_args()
    task = get_task(args.task)
    report = check_kernel(args.kernel, task, CheckOptions(scenario_set=args.scenarios, rounds=args.rounds,
                                                          baselines=bool(task.library_baselines)))
    if args.json:
        args.json.write_text(report.to_json())
    if not report.correct:
        print(f"rejected: {report.failure}", file=sys.stderr)
        return 1
    text = table(report, args.kernel.stem)
    print(text)
    if args.results:
        append_entry(args.results, "Baselines in one run", [f"Device: {report.device}"],
                     f"The kernel verified on every scenario (seed {report.seed}); the original and the library "
                     f"baselines timed in the same rounds; check {report.check_seconds:.0f} s.\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
