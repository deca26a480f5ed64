"""`evokernel check` and `evokernel tasks`: one kernel built, verified and timed against a task."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import click

from evokernel.cli.common import console, fmt, warn_if_not_isolated
from evokernel.output import print_table, scenario_table, within_noise


def print_check_report(report) -> None:
    from rich.markup import escape

    from evokernel.harness import SpeedReference, did_not_compile
    from evokernel.harness.build import first_error_lines

    if not report.scenarios:  # rejected before running (static guard, compiler): only the reason
        console.print(f"[bold red]rejected[/]: {escape(report.failure or 'no scenario ran')}", soft_wrap=True)
        errors = first_error_lines(report.build_log or "") if did_not_compile(report.failure) else []
        for line in errors:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        console.print(f"[dim]{report.isolation}[/]" if report.isolation and "NOT" not in report.isolation
                      else f"[bold yellow]{report.isolation}[/]", soft_wrap=True)
        console.print(f"[dim]{report.task} · {escape(report.kernel)} · "
                      f"build {fmt(report.build_seconds, '.1f')} s[/]", soft_wrap=True)
        return
    columns, rows = scenario_table([asdict(s) for s in report.scenarios], SpeedReference.recorded(report.speed_reference).column)
    print_table(console, columns, rows, title=f"{report.task} · {report.kernel} · scenarios '{report.scenario_set}'")
    if report.correct and report.geomean_speedup is None:
        console.print(f"[bold green]correct[/] on {len(report.scenarios)} scenarios (not timed)")
    elif report.correct:
        noisy = sum(within_noise(s.speedup, s.spread) for s in report.scenarios)
        console.print(f"[bold green]correct[/] on {len(report.scenarios)} scenarios; geomean speedup over "
                      f"{escape(SpeedReference.recorded(report.speed_reference).words)}: [bold]{fmt(report.geomean_speedup)}[/]"
                      + (f" [yellow]({noisy} of {len(report.scenarios)} scenarios within their noise: their spread "
                         f"exceeds their gain)[/]" if noisy else ""), soft_wrap=True)
        for name, value in report.baseline_geomeans.items():
            console.print(f"  candidate speed relative to {name}: {fmt(value)}")
    else:
        console.print(f"[bold red]rejected[/]: {report.failure}")
    phases = report.phase_summary()
    console.print(f"[dim]{report.isolation}[/]" if report.isolation and "NOT" not in report.isolation
                  else f"[bold yellow]{report.isolation}[/]", soft_wrap=True)
    device = f"device {report.device} · " if report.device else ""
    console.print(f"[dim]{device}seed {report.seed} · check {fmt(report.check_seconds, '.1f')} s"
                  + (f" ({phases})" if phases else f" · build {fmt(report.build_seconds, '.1f')} s") + "[/]")


@click.command()
@click.argument("kernel", type=click.Path(path_type=Path))
@click.option("--task", "task_name", required=True, help="A task: built-in name (see `evokernel tasks`) or task directory.")
@click.option("--scenarios", "scenario_set", default="quick", show_default=True, help="Scenario set or 'all'.")
@click.option("--original", "speed_reference",
              help="Speed reference: 'original' (the default), another kernel file, or one of the task's library "
                   "baselines (attention-fwd: cudnn, flash; a task without an original: its first baseline).")
@click.option("--baselines", is_flag=True, help="Also time the task's library baselines (e.g. PyTorch SDPA).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), help="Write the report as JSON here.")
@click.option("--seed", type=int, help="Input seed (default: drawn now).")
@click.option("--trials", type=click.IntRange(1, 20), default=3, show_default=True, help="Random inputs per scenario.")
@click.option("--rounds", type=click.IntRange(1, 1000), help="Interleaved timing rounds (default: per device).")
@click.option("--keep-going", is_flag=True, help="Verify every scenario even after one fails.")
@click.option("--no-time", is_flag=True,
              help="Verify only: no timing, no speedup (and none of the checks made during timing).")
@click.option("--timeout", type=click.FloatRange(1), default=600, show_default=True,
              help="Backstop for the whole check in seconds (hangs are caught sooner by limits scaled to the work).")
@click.option("--memory-limit", type=click.FloatRange(0.25), metavar="GIB",
              help="Memory of the candidate's process tree (default: half of this machine's memory).")
def check(kernel: Path, task_name: str, scenario_set: str, speed_reference: str | None, baselines: bool,
          json_out: Path | None, seed: int | None, trials: int, rounds: int | None, keep_going: bool,
          no_time: bool, timeout: float, memory_limit: float | None) -> None:
    """Build, verify and time KERNEL; exit 0 if it passes the correctness gate, 1 if rejected."""
    from evokernel.errors import read_text
    from evokernel.evaluation import require_gpu
    from evokernel.harness import CheckOptions, check_kernel, get_task

    if kernel.is_file():
        read_text(kernel, "kernel")  # one line naming a file that is not UTF-8
    task = get_task(task_name)
    require_gpu(task.name, task.backend)
    warn_if_not_isolated()
    options = CheckOptions(scenario_set=scenario_set, speed_reference=speed_reference or task.default_speed_reference,
                           baselines=baselines,
                           seed=seed, trials=trials, rounds=rounds, keep_going=keep_going,
                           time_kernels=not no_time, timeout_s=timeout, memory_limit_gb=memory_limit)
    report = check_kernel(kernel, task, options)
    print_check_report(report)
    if json_out:
        json_out.write_text(report.to_json())
    sys.exit(0 if report.correct else 1)


@click.command()
@click.option("--task-dir", "task_dirs", multiple=True, type=click.Path(path_type=Path),
              help="Also list the tasks in this directory (a task directory, or a folder of them); repeatable.")
def tasks(task_dirs: tuple[Path, ...]) -> None:
    """List the tasks (built-in, and those in --task-dir) and their scenario sets."""
    from evokernel.harness import get_task, task_names, tasks_in

    found = [get_task(name) for name in task_names()] + [t for d in task_dirs for t in tasks_in(d)]
    for task in found:
        sets = ", ".join(f"{k} ({len(v)})" for k, v in task.scenario_sets.items())
        baselines = f"\n  library baselines: {', '.join(task.baselines())}" if task.baselines() else ""
        console.print(f"[bold]{task.name}[/]: {task.description}\n  directory: {task.directory}\n"
                      f"  language: {task.language}, {task.dtype}; entry point: {task.entry}\n"
                      f"  scenario sets: {sets}, all\n  ABI header: {task.header}\n  original kernel: "
                      f"{task.original if task.has_original else 'none (a search writes its first kernel)'}"
                      + baselines, soft_wrap=True, highlight=False)
