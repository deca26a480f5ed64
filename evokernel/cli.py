"""The `evokernel` command: check kernels, run searches, inspect lineage, manage the question bank.

Bad input exits with code 2 and a one-line message; a rejected kernel exits with 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from evokernel.errors import BadInput

console = Console()


class Group(click.Group):
    """Turns BadInput anywhere below into `error: ...` and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=Group)
@click.version_option(package_name="evokernel")
def main() -> None:
    """Evolve fast GPU kernels with a correctness-gated harness."""


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def print_check_report(report) -> None:
    table = Table(title=f"{report.task} · {report.kernel} · scenarios '{report.scenario_set}'")
    for column in ("scenario", "ok", "max err / tol", "time ms", f"{report.speed_reference} ms", "speedup", "spread"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    baseline_names = sorted({n for s in report.scenarios for n in s.baselines_ms})
    for name in baseline_names:
        table.add_column(f"{name} ms", justify="right")
    for s in report.scenarios:
        ratio = f"{s.max_err / s.tolerance:.2f}" if s.max_err is not None and s.tolerance else "-"
        flag = "[green]yes[/]" if s.correct else "[red]NO[/]"
        speed = _fmt(s.speedup, ".3f") + (" [yellow]![/]" if s.suspicious else "")
        spread = "-" if s.spread is None else f"{100 * s.spread:.1f}%"
        table.add_row(s.name, flag, ratio, _fmt(s.time_ms, ".4f"), _fmt(s.original_time_ms, ".4f"), speed, spread,
                      *[_fmt(s.baselines_ms.get(n), ".4f") for n in baseline_names])
    console.print(table)
    if report.correct:
        console.print(f"[bold green]correct[/] on {len(report.scenarios)} scenarios; geomean speedup over "
                      f"{report.speed_reference}: [bold]{_fmt(report.geomean_speedup)}[/]"
                      + (" [yellow](suspicious: faster than the roofline; re-verified)[/]" if report.suspicious else ""))
        for name, value in report.baseline_geomeans.items():
            console.print(f"  candidate speed relative to {name}: {_fmt(value)}")
    else:
        console.print(f"[bold red]rejected[/]: {report.failure}")
    console.print(f"[dim]device {report.device} · seed {report.seed} · build {_fmt(report.build_seconds, '.1f')} s · "
                  f"check {_fmt(report.check_seconds, '.1f')} s[/]")


@main.command()
@click.argument("kernel", type=click.Path(path_type=Path))
@click.option("--task", "task_name", required=True, help="Task name (see `evokernel tasks`).")
@click.option("--scenarios", "scenario_set", default="quick", show_default=True, help="Scenario set or 'all'.")
@click.option("--original", "speed_reference", default="original", show_default=True,
              help="Speed reference: 'original', another kernel file, or a library baseline (cudnn, flash).")
@click.option("--baselines", is_flag=True, help="Also time the task's library baselines (PyTorch SDPA).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), help="Write the report as JSON here.")
@click.option("--seed", type=int, help="Input seed (default: drawn now).")
@click.option("--trials", type=click.IntRange(1, 20), default=3, show_default=True, help="Random inputs per scenario.")
@click.option("--rounds", type=click.IntRange(1, 1000), help="Interleaved timing rounds (default: per device).")
@click.option("--keep-going", is_flag=True, help="Verify every scenario even after one fails.")
@click.option("--timeout", type=click.FloatRange(1), default=600, show_default=True, help="Hard limit in seconds.")
def check(kernel: Path, task_name: str, scenario_set: str, speed_reference: str, baselines: bool,
          json_out: Path | None, seed: int | None, trials: int, rounds: int | None, keep_going: bool,
          timeout: float) -> None:
    """Build, verify and time KERNEL; exit 0 if it passes the correctness gate, 1 if rejected."""
    from evokernel.harness import CheckOptions, check_kernel

    options = CheckOptions(scenario_set=scenario_set, speed_reference=speed_reference, baselines=baselines,
                           seed=seed, trials=trials, rounds=rounds, keep_going=keep_going, timeout_s=timeout)
    report = check_kernel(kernel, task_name, options)
    print_check_report(report)
    if json_out:
        json_out.write_text(report.to_json())
    sys.exit(0 if report.correct else 1)


@main.command()
def tasks() -> None:
    """List the tasks and their scenario sets."""
    from evokernel.harness import get_task, task_names

    for name in task_names():
        task = get_task(name)
        sets = ", ".join(f"{k} ({len(v)})" for k, v in task.scenario_sets.items())
        console.print(f"[bold]{name}[/]: {task.description}\n  scenario sets: {sets}, all\n  "
                      f"ABI header: {task.header}\n  original kernel: {task.original}")


# -- search (evokernel run) -----------------------------------------------------------------------

# -- lineage inspection (runs, lineage, show, diff, export, report) --------------------------------

# -- question bank (bank list/add/lint/stats/review) -----------------------------------------------

_bank_dirs = click.option("--bank", "bank_dirs", multiple=True, type=click.Path(path_type=Path),
                          help="A user bank directory (repeatable).")
_builtin = click.option("--builtin/--no-builtin", default=True, show_default=True, help="Include the built-in bank.")


@main.group(cls=Group)
def bank() -> None:
    """The question bank: list, add, lint, statistics, review of proposed questions."""


@bank.command("list")
@_bank_dirs
@_builtin
@click.option("--trigger", help="Only questions asked under this trigger.")
def bank_list(bank_dirs: tuple[Path, ...], builtin: bool, trigger: str | None) -> None:
    """List the questions in force."""
    from evokernel.bank import TRIGGERS, load_bank

    if trigger and trigger not in TRIGGERS:
        raise BadInput(f"--trigger '{trigger}': expected one of {', '.join(TRIGGERS)}")
    questions = load_bank(list(bank_dirs), builtin=builtin)
    table = Table(title=f"{len(questions)} questions")
    for column in ("id", "triggers", "layers", "text", "file"):
        table.add_column(column, overflow="fold")
    for q in questions:
        if trigger is None or trigger in q.triggers:
            table.add_row(q.id, ", ".join(q.triggers), ", ".join(q.layers), q.text, questions.files[q.id].name)
    console.print(table)


@bank.command("add")
@click.option("--bank", "bank_dir", required=True, type=click.Path(path_type=Path), help="User bank directory to write to.")
@click.option("--text", required=True, help="The question.")
@click.option("--trigger", "triggers", multiple=True, help="When to ask it (repeatable; default: default).")
@click.option("--layer", "layers", multiple=True, help="Layer it points at, e.g. memory (repeatable).")
@click.option("--id", "question_id", help="Id (default: made from the text).")
@click.option("--notes", help="Why the question exists.")
def bank_add(bank_dir: Path, text: str, triggers: tuple[str, ...], layers: tuple[str, ...],
             question_id: str | None, notes: str | None) -> None:
    """Add a question to a user bank (refused with reasons if it fails the lint)."""
    from evokernel.bank import admit_question

    path = admit_question(bank_dir, text, list(triggers), list(layers), question_id, notes)
    console.print(f"added [bold]{path.stem}[/] to {path}")


@bank.command("lint")
@_bank_dirs
@_builtin
def bank_lint(bank_dirs: tuple[Path, ...], builtin: bool) -> None:
    """Check that every entry is a bounded question and no two repeat each other; exit 1 with reasons."""
    from evokernel.bank import lint_questions, load_bank

    questions = load_bank(list(bank_dirs), builtin=builtin)
    problems = lint_questions(list(questions), questions.files)
    for problem in problems:
        click.echo(str(problem))
    if problems:
        click.echo(f"{len(problems)} problem(s) in {len(questions)} questions", err=True)
        sys.exit(1)
    console.print(f"{len(questions)} questions, no problems")


if __name__ == "__main__":
    main()
