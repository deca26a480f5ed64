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


def warn_if_not_isolated() -> str:
    """Say at the start of a check or run how candidates are isolated here, loudly when they are not."""
    from evokernel.harness import isolation

    box = isolation()
    if not box.enforced:
        console.print(f"[bold yellow]warning[/]: candidate kernels are {box.describe()}", soft_wrap=True)
    return box.describe()


def print_check_report(report) -> None:
    from rich.markup import escape

    from evokernel.harness.build import first_error_lines

    if not report.scenarios:  # rejected before running (static guard, compiler): only the reason
        console.print(f"[bold red]rejected[/]: {escape(report.failure or 'no scenario ran')}", soft_wrap=True)
        errors = first_error_lines(report.build_log or "") if "does not compile" in (report.failure or "") else []
        for line in errors:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        console.print(f"[dim]{report.isolation}[/]" if report.isolation and "NOT" not in report.isolation
                      else f"[bold yellow]{report.isolation}[/]", soft_wrap=True)
        console.print(f"[dim]{report.task} · {escape(report.kernel)} · "
                      f"build {_fmt(report.build_seconds, '.1f')} s[/]", soft_wrap=True)
        return
    table = Table(title=f"{report.task} · {report.kernel} · scenarios '{report.scenario_set}'")
    for column in ("scenario", "ok", "max err / tol", "time ms", f"{report.speed_reference} ms", "speedup", "spread"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    baseline_names = sorted({n for s in report.scenarios for n in s.baselines_ms})
    for name in baseline_names:
        table.add_column(f"{name} ms", justify="right")
    for s in report.scenarios:
        ratio = f"{s.max_err / s.tolerance:.2f}" if s.max_err is not None and s.tolerance else "-"
        flag = "[green]yes[/]" if s.correct else "[red]NO[/]"
        speed = _fmt(s.speedup, ".3f") + (" [red]below the roofline[/]" if s.suspicious else "")
        spread = "-" if s.spread is None else f"{100 * s.spread:.1f}%"
        table.add_row(s.name, flag, ratio, _fmt(s.time_ms, ".4f"), _fmt(s.original_time_ms, ".4f"), speed, spread,
                      *[_fmt(s.baselines_ms.get(n), ".4f") for n in baseline_names])
    console.print(table)
    if report.correct and report.geomean_speedup is None:
        console.print(f"[bold green]correct[/] on {len(report.scenarios)} scenarios (not timed)")
    elif report.correct:
        console.print(f"[bold green]correct[/] on {len(report.scenarios)} scenarios; geomean speedup over "
                      f"{report.speed_reference}: [bold]{_fmt(report.geomean_speedup)}[/]"
                      )
        for name, value in report.baseline_geomeans.items():
            console.print(f"  candidate speed relative to {name}: {_fmt(value)}")
    else:
        console.print(f"[bold red]rejected[/]: {report.failure}")
    phases = report.phase_summary()
    console.print(f"[dim]{report.isolation}[/]" if report.isolation and "NOT" not in report.isolation
                  else f"[bold yellow]{report.isolation}[/]", soft_wrap=True)
    device = f"device {report.device} · " if report.device else ""
    console.print(f"[dim]{device}seed {report.seed} · check {_fmt(report.check_seconds, '.1f')} s"
                  + (f" ({phases})" if phases else f" · build {_fmt(report.build_seconds, '.1f')} s") + "[/]")


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
@click.option("--no-time", is_flag=True,
              help="Verify only: no timing, no speedup (and none of the checks made during timing).")
@click.option("--timeout", type=click.FloatRange(1), default=600, show_default=True,
              help="Backstop for the whole check in seconds (hangs are caught sooner by limits scaled to the work).")
@click.option("--memory-limit", type=click.FloatRange(0.25), metavar="GIB",
              help="Memory of the candidate's process tree (default: half of this machine's memory).")
def check(kernel: Path, task_name: str, scenario_set: str, speed_reference: str, baselines: bool,
          json_out: Path | None, seed: int | None, trials: int, rounds: int | None, keep_going: bool,
          no_time: bool, timeout: float, memory_limit: float | None) -> None:
    """Build, verify and time KERNEL; exit 0 if it passes the correctness gate, 1 if rejected."""
    from evokernel.errors import read_text
    from evokernel.harness import CheckOptions, check_kernel

    for path, what in ((kernel, "kernel"), (Path(speed_reference), "--original")):
        if path.is_file() and str(path) != "original":
            read_text(path, what)  # one line naming a file that is not UTF-8
    warn_if_not_isolated()
    options = CheckOptions(scenario_set=scenario_set, speed_reference=speed_reference, baselines=baselines,
                           seed=seed, trials=trials, rounds=rounds, keep_going=keep_going,
                           time_kernels=not no_time, timeout_s=timeout, memory_limit_gb=memory_limit)
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

def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "30m", "1.5h" or "1h30m"; BadInput naming --wall-time otherwise."""
    import re

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)", text.strip().lower())
    if not parts or re.sub(r"(\d+(?:\.\d*)?|\.\d+)\s*[smhd]?", "", text.strip().lower()).strip() \
            or (len(parts) > 1 and not all(unit for _, unit in parts)):
        raise BadInput(f"--wall-time '{text}': expected seconds or a duration such as 90, 45s, 30m, 1.5h or 1h30m")
    return sum(float(number) * units[unit or "s"] for number, unit in parts)


# command-line override -> (config field it sets, as parse_config names it)
RUN_OVERRIDES = {"--scenarios": "scenarios", "--seed": "random_seed", "--population": "population_size",
                 "--wall-time": "budget.wall_time_s", "--usd": "budget.usd", "--budget": "budget.evaluations"}


def _run_config(config_path: Path | None, resume: Path | None, model: str | None, api_base: str | None,
                budget: int | None, address: str | None, scenarios: str | None = None, random_seed: int | None = None,
                population: int | None = None, wall_time: str | None = None, usd: float | None = None):
    """The config of a new or resumed run, with the command-line overrides applied and validated."""
    from evokernel.config import load_config, parse_config
    from evokernel.defaults import default_config_path

    if resume is not None:
        if config_path is not None:
            raise BadInput("give either CONFIG or --resume RUN_DIR (a resumed run keeps its own config)")
        config_path = resume / "config.yaml"
        if not config_path.is_file():
            raise BadInput(f"--resume {resume}: not a run directory (no config.yaml)")
    elif config_path is None:
        config_path = default_config_path()
        console.print(f"[dim]no CONFIG given: using the embedded default {config_path.name}[/]")
    config = load_config(config_path)
    data = config.model_dump(mode="json", by_alias=True)
    if model:
        data["llm"]["models"] = [{"model": model, "api_base": api_base}]
    elif api_base:
        if not data["llm"]["models"]:
            raise BadInput("--api-base needs a model (--model, or llm.models in the config)")
        for entry in data["llm"]["models"]:
            entry["api_base"] = api_base
    if resume is not None:
        fixed = [name for name, value in (("--scenarios", scenarios), ("--population", population),
                                          ("--seed", random_seed)) if value is not None]
        if fixed:
            raise BadInput(f"{', '.join(fixed)}: a resumed run keeps its own (only budgets and models may change)")
    given = {}
    if budget is not None:
        data["budget"]["evaluations"] = given["--budget"] = budget
    if address is not None:
        data["resources"]["address"] = address
    if scenarios is not None:
        data["scenarios"] = given["--scenarios"] = scenarios
    if random_seed is not None:
        data["random_seed"] = given["--seed"] = random_seed
    if population is not None:
        data["population_size"] = given["--population"] = population
    if wall_time is not None:
        data["budget"]["wall_time_s"] = parse_duration(wall_time)
        given["--wall-time"] = wall_time
    if usd is not None:
        data["budget"]["usd"] = given["--usd"] = usd
    try:
        return parse_config(data, f"{config_path} (with command-line options)")
    except BadInput as exc:  # name the option rather than the config field it set
        for option, value in given.items():
            field = RUN_OVERRIDES[option]
            prefix = f"{config_path} (with command-line options): field '{field}': "
            if str(exc).startswith(prefix):
                raise BadInput(f"{option} {value}: {str(exc)[len(prefix):]}") from None
            if field == "scenarios" and "field 'task'/'scenarios'" in str(exc):
                raise BadInput(f"--scenarios {value}: {str(exc).split(': ', 2)[-1]}") from None
        raise


def _with_replay(config, replay: Path):
    """Answers from RUN_DIR's recorded calls; a config without models takes the replayed run's."""
    from evokernel.config import ModelConfig
    from evokernel.store import Store

    if not (replay / "lineage.db").is_file():
        raise BadInput(f"--replay {replay}: not a run directory (no lineage.db)")
    config.llm.replay_from = replay.resolve()
    if not config.llm.models:
        with Store(replay, readonly=True) as store:
            recorded = (store.meta().get("config") or {}).get("llm", {}).get("models") or []
        if not recorded:
            raise BadInput(f"--replay {replay}: that run had no model (and CONFIG names none)")
        config.llm.models = [ModelConfig.model_validate(entry) for entry in recorded]
    return config


def _llm_preflight(config, check: bool) -> None:
    """Before the search: a USD budget needs a price per model; one short call per model (unless skipped)
    turns a wrong model name, key or endpoint into a one-line error. A replay calls no model."""
    from evokernel.search import LLM_OPERATORS

    weights = config.operators.as_dict()
    if not config.llm.models or not any(weights.get(name, 0) > 0 for name in LLM_OPERATORS):
        return
    from evokernel.mutations.llm import LLMClient, all_models, check_prices, replay_answers

    if config.llm.replay_from is not None:
        replay_answers(config.llm.replay_from)  # one line when there is nothing to replay
        return
    check_prices(config)
    if check:
        console.print(f"[dim]checking {len(all_models(config.llm))} model(s) with one short call each "
                      "(skip with --no-llm-check)[/]")
        LLMClient(config.llm).check()


def _progress_table(stats) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    budget = f" / {stats.budget}" if stats.budget else ""
    table.add_row("evaluations", f"{stats.evaluations}{budget}  (in flight {stats.in_flight}, queued "
                                 f"{stats.queued}, proposing {stats.proposing})")
    best = "-" if stats.best_id is None else f"{stats.best_fitness:.3f} (individual {stats.best_id})"
    table.add_row("best geomean", best)
    failures = ", ".join(f"{kind} {n}" for kind, n in stats.failures.most_common()) or "none"
    table.add_row("rejected", failures)
    skipped = f"{stats.duplicates} duplicates"
    if stats.proposal_failures:
        skipped += ", failed proposals " + ", ".join(f"{op} {n}" for op, n in stats.proposal_failures.items())
    table.add_row("skipped", skipped)
    busy = "-" if stats.busy_fraction is None else f"{100 * stats.busy_fraction:.0f}%"
    table.add_row("workers busy", f"{busy} of {stats.slots} evaluation slot(s)")
    table.add_row("LLM cost", f"${stats.cost_usd:.2f}" if stats.llm else "no model")
    table.add_row("elapsed", f"{stats.elapsed_s:.0f} s")
    if stats.last:
        table.add_row("last", stats.last)
    return table


def _log_line(stats) -> str:
    best = "-" if stats.best_id is None else f"{stats.best_fitness:.3f} (#{stats.best_id})"
    busy = "-" if stats.busy_fraction is None else f"{100 * stats.busy_fraction:.0f}%"
    return (f"[{stats.evaluations}{'/' + str(stats.budget) if stats.budget else ''}] best {best} · busy {busy}"
            f" · rejected {sum(stats.failures.values())} · duplicates {stats.duplicates}"
            + (f" · ${stats.cost_usd:.2f}" if stats.llm else "") + f" · {stats.last or ''}")


def _print_outcome(result, run_dir: Path, speed_reference: str) -> None:
    from evokernel.harness import speed_reference_label
    from evokernel.store import Store

    stats = result.stats
    console.print(f"\nrun {result.status}: {result.reason} · {stats.evaluations} evaluations, "
                  f"{sum(stats.failures.values())} rejected, {stats.duplicates} duplicates skipped", soft_wrap=True)
    if stats.llm:
        with Store(run_dir, readonly=True) as store:
            calls, failed = store.llm_calls(), store.llm_failures()
        cached = sum(1 for call in calls if call["cached"])
        console.print(f"LLM calls: {len(calls)}" + (f" ({cached} answered from the cache or the replayed run)"
                                                    if cached else "")
                      + f", {sum(failed.values())} failed"
                      + (": " + ", ".join(f"{reason} {n}" for reason, n in failed.items()) if failed else ""),
                      soft_wrap=True, markup=False, highlight=False)
    if result.best is None:
        console.print("[bold red]no correct kernel[/]" if stats.evaluations else "no kernel evaluated yet")
        return
    best = result.best
    with Store(run_dir, readonly=True) as store:
        path = store.source_path(best.source_hash, best.language)
        retime = store.meta().get("best_recheck")
    retime = retime if isinstance(retime, dict) and retime.get("id") == best.id else None
    over_seed = ""
    if best.operator == "seed":
        over_seed = ", a seed: no kernel of the search beat it"
    elif stats.seed_fitness:
        over_seed = (f", {best.fitness / stats.seed_fitness:.3f}x the seed (individual {stats.seed_id})"
                     + (" in the search" if retime else ""))
    console.print(f"[bold green]best kernel[/]: individual {best.id} ({best.operator}), geomean speedup "
                  f"{best.fitness:.3f} over {speed_reference_label(speed_reference)}{over_seed}", soft_wrap=True)
    if retime:
        from rich.markup import escape

        from evokernel.lineage import describe_retime

        colour = "green" if retime["verdict"] == "gain" else "yellow"
        console.print(f"  [{colour}]{escape(describe_retime(retime))}[/]", soft_wrap=True, highlight=False)
    console.print(f"  source: {path}", soft_wrap=True)
    if best.knobs:
        console.print("  knobs: " + ", ".join(f"{k}={v}" for k, v in best.knobs.items()))
    console.print(f"inspect it:\n  evokernel lineage {run_dir} --best\n  evokernel show {run_dir} {best.id}\n"
                  f"  evokernel report {run_dir} -o report.html", soft_wrap=True)


RUN_DIR_KEY = "evokernel.run_dir"  # click context meta: the run directory, once `run` has chosen it


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _resumable(command):
    """Ctrl-C or SIGTERM anywhere in `run` (the search itself turns them into a stopped run) ends with how
    to resume the run and exit code 130, not click's 'Aborted!'."""
    import functools
    import signal
    import threading

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        context = click.get_current_context()
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _raise_interrupt) if main_thread else None
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            run_dir = context.meta.get(RUN_DIR_KEY)
            if run_dir is not None and (Path(run_dir) / "config.yaml").is_file():
                console.print(f"\ninterrupted: continue it with: evokernel run --resume {run_dir}", soft_wrap=True)
            else:
                console.print("\ninterrupted before the run started: nothing to resume")
            sys.exit(130)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    return wrapper


@main.command()
@click.argument("config_path", metavar="[CONFIG]", required=False, type=click.Path(path_type=Path))
@click.option("--model", help="LLM for the question operators (any litellm model string).")
@click.option("--api-base", help="API base URL for the model (e.g. a local OpenAI-compatible server).")
@click.option("--budget", type=click.IntRange(1), help="Evaluations in total (a resumed run counts earlier ones).")
@click.option("--scenarios", help="Scenario set the fitness is measured on (see `evokernel tasks`).")
@click.option("--seed", "random_seed", type=int, help="Random seed of the search (selection, operators).")
@click.option("--population", type=int, help="Population size (at least 2).")
@click.option("--wall-time", help="Wall-time budget: no new proposals after this long (seconds, or e.g. 45s, 30m, "
                                  "1.5h, 1h30m).")
@click.option("--usd", type=float, help="LLM budget in US dollars: no new LLM proposals once it is spent.")
@click.option("--address", help="Ray cluster to join ('auto' for the one this machine belongs to).")
@click.option("--resume", type=click.Path(path_type=Path), help="Continue the run in this directory.")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Where new run directories are created.")
@click.option("--replay", type=click.Path(path_type=Path),
              help="Answer the questions from this run's recorded LLM calls, without any network.")
@click.option("--no-llm-check", is_flag=True, help="Skip the short call to each model before the search starts.")
@_resumable
def run(config_path: Path | None, model: str | None, api_base: str | None, budget: int | None,
        address: str | None, resume: Path | None, runs_dir: Path, replay: Path | None, no_llm_check: bool,
        scenarios: str | None, random_seed: int | None, population: int | None, wall_time: str | None,
        usd: float | None) -> None:
    """Evolve kernels: CONFIG (default: the embedded CPU or GPU config) on a local Ray instance or a cluster."""
    from rich.live import Live

    from evokernel.search import Search, new_run_dir

    config = _run_config(config_path, resume, model, api_base, budget, address, scenarios=scenarios,
                         random_seed=random_seed, population=population, wall_time=wall_time, usd=usd)
    if replay is not None:
        config = _with_replay(config, replay)
    _llm_preflight(config, check=not no_llm_check)
    run_dir = resume if resume is not None else new_run_dir(runs_dir)
    click.get_current_context().meta[RUN_DIR_KEY] = run_dir
    if console.is_terminal:
        live = Live(console=console, refresh_per_second=4, transient=False)

        def progress(stats) -> None:
            live.update(_progress_table(stats))
    else:
        live, seen = None, [None]

        def progress(stats) -> None:
            if stats.last != seen[0]:
                seen[0] = stats.last
                click.echo(_log_line(stats))

    search = Search(config, run_dir, resume=resume is not None, progress=progress,
                    notify=lambda line: console.print(line, soft_wrap=True))
    console.print(f"run directory: {run_dir} · task {config.task} · scenarios '{config.scenarios}'", soft_wrap=True)
    warn_if_not_isolated()
    if live is not None:
        with live:
            result = search.run()
    else:
        result = search.run()
    _print_outcome(result, run_dir, config.speed_reference)
    if result.status == "stopped":
        console.print(f"continue it with: evokernel run --resume {run_dir}", soft_wrap=True)
        if search.sigterm_in_ray_start:
            import os

            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)  # Ray's handler, hit while it started, would abort the interpreter's exit
        sys.exit(130)
    if result.best is None:
        sys.exit(1)


# -- lineage inspection (runs, lineage, show, diff, export, report) --------------------------------

RUN_HELP = "RUN is a run directory, a run id under ./runs, or 'latest'."


def _open_run(run: str):
    from evokernel.lineage import Lineage

    return Lineage.open(run)


def _when(timestamp: float | None) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else "-"


def _gain(before: float | None, after: float | None) -> str:
    return f" ({100 * (after / before - 1):+.1f}%)" if before and after else ""


def _kernel_label(run, ind, parent=None) -> str:
    """One line about a kernel; its gain is over `parent` (default: its first parent)."""
    from rich.markup import escape

    question = f" [magenta]{escape(ind.question_id)}[/]" if ind.question_id else ""
    if parent is None:
        parent = next(iter(run.parents(ind.id)), None)
    if ind.status == "correct":
        result = f"[green]{_fmt(ind.fitness)}[/]" + _gain(parent.fitness if parent else None, ind.fitness)
    elif ind.status == "rejected":
        reason = (run.failure(ind.id) or "").strip().splitlines()
        result = f"[red]rejected[/]: {escape(reason[0] if reason else '')}"
    else:
        result = f"[dim]{ind.status}[/]"
    return f"[bold]#{ind.id}[/] {ind.operator}{question} {result}"


def _ratio(before: float | None, after: float | None) -> float | None:
    return after / before - 1 if before and after else None


_json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON (complete, machine-readable) instead.")


@main.command()
@click.argument("directory", type=click.Path(path_type=Path), default=Path("runs"))
@_json_flag
def runs(directory: Path, as_json: bool) -> None:
    """List the runs under DIRECTORY (default ./runs), newest first.

    Piped output is one tab-separated line per run after a header line.
    """
    from dataclasses import asdict

    from rich import box

    from evokernel.lineage import find_runs
    from evokernel.output import Column, print_json, print_table

    summaries = find_runs(directory)
    if as_json:
        print_json([asdict(s) for s in summaries])
        return
    if not summaries:
        console.print(f"no runs under {directory}/")
        return
    columns = [Column("run", no_wrap=True), Column("status", no_wrap=True), Column("task"),
               *(Column(name, right=True) for name in ("evaluations", "best geomean", "cost $", "started"))]
    rows = [[s.id, s.status, s.task or "-", f"{s.evaluations} ({s.correct} ok)",
             f"{_fmt(s.best)} (#{s.best_id})" if s.best_id else "-", f"{s.cost_usd:.4f}", _when(s.started_at)]
            for s in summaries]
    print_table(console, columns, rows, title=f"runs under {directory}/", box=box.SIMPLE_HEAD)


@main.command()
@click.argument("run")
@click.option("--id", "kernel_id", type=int, help="The kernel to trace.")
@click.option("--best", is_flag=True, help="Trace the best kernel (the default).")
@click.option("--top", type=click.IntRange(1), help="Trace each of the K best kernels.")
@click.option("--tree", is_flag=True, help="Draw the descendant tree instead: of every seed (with --id: of that "
                                           "kernel; with --best or --top: only the paths to those kernels).")
@_json_flag
def lineage(run: str, kernel_id: int | None, best: bool, top: int | None, tree: bool, as_json: bool) -> None:
    """Where a kernel came from: one line per step from the seed, with the question asked and the gain.

    RUN is a run directory, a run id under ./runs, or 'latest'. In the tree a kernel with two parents
    appears under both, each time with its gain over that parent.
    """
    from rich.markup import escape

    from evokernel.output import print_json

    if (kernel_id is not None) + best + (top is not None) > 1:
        raise BadInput("choose one of --id, --best, --top")
    with _open_run(run) as lin:
        if tree:
            if kernel_id is not None:
                roots, keep, stars = [lin.get(kernel_id).id], None, {kernel_id}
            elif best or top:
                chosen = lin.top(top) if top else [lin.best()]
                if not chosen:
                    raise BadInput(f"run {lin.name} has no correct kernel yet")
                stars = {t.id for t in chosen}
                keep = set().union(*(lin.ancestors(t) for t in stars))
                roots = lin.roots(keep)
            else:  # the whole run: every kernel without a parent in it, and all of their descendants
                keep, stars = None, {t.id for t in lin.top(1)}
                roots = [i for i, ind in lin.individuals.items()
                         if not any(p in lin.individuals for p in ind.parent_ids)]
            trees = [lin.descendants(root, keep) for root in roots]
            if as_json:
                print_json([_tree_json(lin, node, None, stars) for node in trees])
            elif console.is_terminal:
                _print_rich_trees(lin, trees, stars)
            else:
                _print_plain_trees(lin, trees, stars)
            return
        targets = [lin.get(kernel_id)] if kernel_id is not None else lin.top(top) if top else [lin.best()]
        if not targets:
            raise BadInput(f"run {lin.name} has no correct kernel yet")
        if as_json:
            print_json([{"id": t.id, "status": t.status, "fitness": t.fitness, "retime": lin.retime(t.id),
                         "steps": [_step_json(lin, step) for step in lin.ancestry(t.id)]} for t in targets])
            return
        for target in targets:
            steps = lin.ancestry(target.id)
            console.print(f"[bold]run {escape(lin.name)} · kernel #{target.id}[/] · "
                          f"{target.status} {_fmt(target.fitness)} · {len(steps) - 1} steps from seed "
                          f"#{steps[0].individual.id}", soft_wrap=True)
            retime = lin.retime(target.id)
            if retime:
                from evokernel.lineage import describe_retime

                colour = "green" if retime["verdict"] == "gain" else "yellow"
                console.print(f"  [{colour}]{escape(describe_retime(retime))}[/]", soft_wrap=True, highlight=False)
            for step in steps:
                ind, parent = step.individual, step.parent
                question = (f"[magenta]{escape(ind.question_id)}[/] \"{escape(step.question_text or '?')}\""
                            if ind.question_id else "[dim]no question[/]")
                before = _fmt(parent.fitness) if parent else "-"
                after = _fmt(ind.fitness) if ind.status == "correct" else f"[red]{ind.status}[/]"
                others = f" (+ {', '.join(f'#{p}' for p in step.other_parents)})" if step.other_parents else ""
                line = (f"  #{ind.id:<4} {ind.operator}{others} · {question} · {escape(ind.model or '-')} · "
                        f"{before} -> {after}{_gain(parent.fitness if parent else None, ind.fitness)}")
                if parent:
                    line += (f" · wins {len(step.wins)}: {', '.join(step.wins) or '-'} · "
                             f"losses {len(step.losses)}: {', '.join(step.losses) or '-'}"
                             + (f" · {len(step.ties)} within noise" if step.ties else ""))
                console.print(line, soft_wrap=True)
                if ind.status == "rejected":
                    console.print(f"         [red]{escape(lin.failure(ind.id) or '')}[/]", soft_wrap=True)


def _step_json(lin, step) -> dict:
    ind, parent = step.individual, step.parent
    return {"id": ind.id, "operator": ind.operator, "parent": parent.id if parent else None,
            "other_parents": step.other_parents, "question_id": ind.question_id, "question_text": step.question_text,
            "trigger": ind.trigger, "model": ind.model, "status": ind.status, "fitness": ind.fitness,
            "parent_fitness": parent.fitness if parent else None,
            "gain": _ratio(parent.fitness if parent else None, ind.fitness if ind.status == "correct" else None),
            "wins": step.wins, "losses": step.losses, "ties": step.ties, "failure": lin.failure(ind.id)}


def _tree_json(lin, node, parent, stars: set[int]) -> dict:
    ind = node.individual
    return {"id": ind.id, "operator": ind.operator, "question_id": ind.question_id, "status": ind.status,
            "fitness": ind.fitness, "parent": parent.id if parent else None,
            "gain": _ratio(parent.fitness if parent else None, ind.fitness if ind.status == "correct" else None),
            "failure": lin.failure(ind.id), "best": ind.id in stars, "shown_above": node.repeat,
            "children": [_tree_json(lin, child, ind, stars) for child in node.children]}


def _tree_label(lin, node, parent, stars: set[int]) -> str:
    return (_kernel_label(lin, node.individual, parent) + (" [yellow]★[/]" if node.individual.id in stars else "")
            + (" [dim](shown above)[/]" if node.repeat else ""))


def _print_rich_trees(lin, trees, stars: set[int]) -> None:
    from rich.markup import escape
    from rich.tree import Tree

    def draw(node, parent, branch) -> None:
        sub = branch.add(_tree_label(lin, node, parent, stars))
        for child in node.children:
            draw(child, node.individual, sub)

    for node in trees:
        top = Tree(f"run {escape(lin.name)}")
        draw(node, None, top)
        console.print(top)


def _print_plain_trees(lin, trees, stars: set[int]) -> None:
    """The tree as plain lines (output not a terminal): one kernel per line, nothing wrapped or cut."""
    from rich.text import Text

    def draw(node, parent, prefix: str, last: bool) -> None:
        label = Text.from_markup(_tree_label(lin, node, parent, stars)).plain
        click.echo(prefix + ("└── " if last else "├── ") + label)
        for n, child in enumerate(node.children):
            draw(child, node.individual, prefix + ("    " if last else "│   "), n == len(node.children) - 1)

    for node in trees:
        click.echo(f"run {lin.name}")
        draw(node, None, "", True)


def _print_deltas(title: str, deltas, before: str, after: str) -> None:
    from rich.text import Text

    from evokernel.output import Column, print_table

    colour = {"win": "green", "fixed": "green", "loss": "red", "broke": "red"}
    console.print(f"[bold]{title}[/]", markup=True, highlight=False, soft_wrap=True)
    columns = [Column("scenario"), *(Column(c, right=True) for c in (before, after, "ratio", "noise", "verdict"))]
    print_table(console, columns, [[d.name, _fmt(d.before), _fmt(d.after), _fmt(d.ratio), f"{100 * d.noise:.1f}%",
                                    Text(d.verdict, style=colour.get(d.verdict, "dim"))] for d in deltas])


def _delta_json(d) -> dict:
    return {"scenario": d.name, "before": d.before, "after": d.after, "ratio": d.ratio, "noise": d.noise,
            "verdict": d.verdict}


@main.command()
@click.argument("run")
@click.argument("kernel_id", metavar="ID", type=int)
@_json_flag
def show(run: str, kernel_id: int, as_json: bool) -> None:
    """Everything about kernel ID: source, diff against its parents, per-scenario results, build log, LLM exchange.

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    from rich.markup import escape
    from rich.rule import Rule
    from rich.syntax import Syntax
    from rich.text import Text

    from evokernel.output import Column, print_json, print_table

    with _open_run(run) as lin:
        ind = lin.get(kernel_id)
        parents = lin.parents(ind.id)
        if as_json:
            print_json({
                "run": lin.name, "id": ind.id, "operator": ind.operator, "parent_ids": ind.parent_ids,
                "generation": ind.generation, "model": ind.model, "trigger": ind.trigger,
                "question_id": ind.question_id, "question_text": lin.question_text(ind.question_id),
                "knobs": ind.knobs, "status": ind.status, "fitness": ind.fitness,
                "gain": _ratio(parents[0].fitness if parents else None,
                               ind.fitness if ind.status == "correct" else None),
                "failure": lin.failure(ind.id), "source_file": lin.source_name(ind.id), "source": lin.source(ind.id),
                "diffs": [{"parent": p.id, "diff": lin.diff(p.id, ind.id)} for p in parents],
                "scenarios": lin.scenarios(ind.id),
                "against_parents": [{"parent": p.id, "scenarios": [_delta_json(d) for d in lin.compare(p.id, ind.id)]}
                                    for p in parents],
                "build_log": lin.build_log(ind.id), "llm_call": lin.llm_call(ind.id)})
            return
        console.print(Rule(f"kernel #{ind.id} of run {escape(lin.name)}"))
        parent_ids = ", ".join(f"#{p}" for p in ind.parent_ids) or "none (seed)"
        console.print(_kernel_label(lin, ind), soft_wrap=True)
        console.print(f"operator {ind.operator} · parents {parent_ids} · generation {ind.generation} · "
                      f"model {escape(ind.model or '-')} · trigger {escape(ind.trigger or '-')} · "
                      f"{escape(lin.source_name(ind.id))}", soft_wrap=True)
        if ind.question_id:
            text = lin.question_text(ind.question_id) or "(text not in the bank or the run)"
            console.print(f"question [magenta]{escape(ind.question_id)}[/]: {escape(text)}", soft_wrap=True)
        if ind.knobs:
            console.print(f"knobs: {escape(json.dumps(ind.knobs, sort_keys=True))}", soft_wrap=True)
        language = "cuda" if ind.language == "cuda" else "c"
        console.print(Rule("source"))
        console.print(Syntax(lin.source(ind.id), language, line_numbers=True, word_wrap=True))
        for parent in parents:
            console.print(Rule(f"diff against parent #{parent.id}"))
            console.print(Syntax(lin.diff(parent.id, ind.id) or "(identical)", "diff", word_wrap=True))
        console.print(Rule("scenarios"))
        rows = lin.scenarios(ind.id)
        if rows:
            columns = [Column("scenario"), *(Column(c, right=True) for c in ("ok", "rel err", "time ms", "original ms",
                                                                               "speedup", "spread")), Column("error")]
            print_table(console, columns, [
                [r["name"], Text("yes", style="green") if r["correct"] else Text("NO", style="red"),
                 _fmt(r["rel_err"], ".2e"), _fmt(r["time_ms"], ".4f"), _fmt(r["original_time_ms"], ".4f"),
                 _fmt(r["speedup"]), "-" if r["spread"] is None else f"{100 * r['spread']:.1f}%", r["error"] or ""]
                for r in rows])
            if parents:
                _print_deltas(f"against parent #{parents[0].id}", lin.compare(parents[0].id, ind.id),
                              f"#{parents[0].id}", f"#{ind.id}")
        else:
            console.print("[dim]no scenario results (rejected before running, or not evaluated yet)[/]")
        if ind.failure:
            console.print(f"[red]rejected:[/] {escape(lin.failure(ind.id))}", soft_wrap=True)
        if ind.build_log:
            console.print(Rule("build log"))
            console.print(lin.build_log(ind.id), markup=False, highlight=False, soft_wrap=True)
        call = lin.llm_call(ind.id)
        if call:
            console.print(Rule(f"LLM exchange · {escape(call['model'])} · {call['prompt_tokens'] or '?'} + "
                               f"{call['completion_tokens'] or '?'} tokens · ${call['cost_usd']:.4f}"))
            console.print("[bold]prompt[/]")
            console.print(call["prompt"], markup=False, highlight=False, soft_wrap=True)
            console.print("[bold]answer[/]")
            console.print(call["response"] or call["error"] or "", markup=False, highlight=False, soft_wrap=True)


@main.command()
@click.argument("run")
@click.argument("id_a", metavar="ID_A", type=int)
@click.argument("id_b", metavar="ID_B", type=int)
def diff(run: str, id_a: int, id_b: int) -> None:
    """Source diff from kernel ID_A to ID_B and their per-scenario speeds.

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    from rich.syntax import Syntax

    with _open_run(run) as lin:
        a, b = lin.get(id_a), lin.get(id_b)
        console.print(Syntax(lin.diff(a.id, b.id) or "(identical sources)", "diff", word_wrap=True))
        _print_deltas(f"speedup over {lin.speed_reference}: #{a.id} -> #{b.id}", lin.compare(a.id, b.id),
                      f"#{a.id}", f"#{b.id}")
        console.print(f"geomean: #{a.id} {_fmt(a.fitness)} ({a.status}) -> #{b.id} {_fmt(b.fitness)} ({b.status})"
                      f"{_gain(a.fitness, b.fitness)}")


@main.command()
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="Directory to write individuals, scenario_results and llm_calls into (created).")
def export(run: str, fmt: str, output: Path) -> None:
    """Write the run as tables: OUTPUT/individuals.FMT, OUTPUT/scenario_results.FMT, OUTPUT/llm_calls.FMT.

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    if output.exists() and not output.is_dir():
        raise BadInput(f"-o {output}: exists and is not a directory (export writes several tables into a directory)")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise BadInput("--format parquet needs pyarrow, which evokernel depends on: pip install pyarrow") from None
    with _open_run(run) as lin:
        tables = {"individuals": lin.individuals_table(), "scenario_results": lin.scenarios_table(),
                  "llm_calls": lin.llm_calls_table()}
        for name, frame in tables.items():
            path = output / f"{name}.{fmt}"
            try:
                output.mkdir(parents=True, exist_ok=True)
                frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path, index=False)
            except OSError as exc:
                raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
            console.print(f"{path}: {len(frame)} rows")


@main.command()
@click.argument("run")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("report.html"), show_default=True)
@click.option("--top", "top_k", type=click.IntRange(1), default=10, show_default=True,
              help="Kernels shown in the lineage graph and the heatmap.")
def report(run: str, output: Path, top_k: int) -> None:
    """Write a self-contained HTML report of the run (opens offline in any browser).

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    from evokernel.report import write_report

    with _open_run(run) as lin:
        write_report(lin, output, top_k)
        console.print(f"wrote {output} ({output.stat().st_size // 1024} KiB): run {lin.name}, "
                      f"{len(lin.individuals)} kernels")

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
@click.option("--device", help="Only questions that apply to this device (gpu or cpu).")
@_json_flag
def bank_list(bank_dirs: tuple[Path, ...], builtin: bool, trigger: str | None, device: str | None,
              as_json: bool) -> None:
    """List the questions in force (piped: one tab-separated line per question after a header line)."""
    from evokernel.bank import TRIGGERS, load_bank
    from evokernel.bank.questions import DEVICES
    from evokernel.output import Column, print_json, print_table

    if trigger and trigger not in TRIGGERS:
        raise BadInput(f"--trigger '{trigger}': expected one of {', '.join(TRIGGERS)}")
    if device and device not in DEVICES:
        raise BadInput(f"--device '{device}': expected one of {', '.join(DEVICES)}")
    questions = load_bank(list(bank_dirs), builtin=builtin)
    shown = [q for q in questions if (trigger is None or trigger in q.triggers) and q.applies_to(device)]
    if as_json:
        print_json([{**q.model_dump(), "file": str(questions.files[q.id])} for q in shown])
        return
    print_table(console, [Column("id", no_wrap=True), "triggers", "layers", "devices", "text", "file"],
                [[q.id, ", ".join(q.triggers), ", ".join(q.layers), ", ".join(q.devices) or "all", q.text,
                  questions.files[q.id].name] for q in shown],
                title=f"{len(shown)} of {len(questions)} questions" if len(shown) != len(questions)
                else f"{len(questions)} questions")


@bank.command("add")
@click.option("--bank", "bank_dir", required=True, type=click.Path(path_type=Path), help="User bank directory to write to.")
@click.option("--text", required=True, help="The question.")
@click.option("--trigger", "triggers", multiple=True, help="When to ask it (repeatable; default: default).")
@click.option("--layer", "layers", multiple=True,
              help="Layer it points at (repeatable): memory, compute, pipeline, scheduling, numerics, measurement, "
                   "correctness.")
@click.option("--device", "devices", multiple=True, help="Only for tasks on this device, gpu or cpu (repeatable; "
                                                         "default: every device).")
@click.option("--id", "question_id", help="Id (default: made from the text).")
@click.option("--notes", help="Why the question exists.")
def bank_add(bank_dir: Path, text: str, triggers: tuple[str, ...], layers: tuple[str, ...], devices: tuple[str, ...],
             question_id: str | None, notes: str | None) -> None:
    """Add a question to a user bank (refused with reasons if it fails the lint)."""
    from evokernel.bank import admit_question

    path = admit_question(bank_dir, text, list(triggers), list(layers), question_id, notes, devices=list(devices))
    console.print(f"added [bold]{path.stem}[/] to {path}", soft_wrap=True)


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


@bank.command("stats")
@click.argument("runs", nargs=-1, required=True)
@_json_flag
def bank_stats(runs: tuple[str, ...], as_json: bool) -> None:
    """Per question over RUNS (run directories or ids): times asked, children correct, better than parent, mean gain."""
    from evokernel.bank import question_stats
    from evokernel.lineage import resolve_run
    from evokernel.output import Column, print_json, print_table

    frame = question_stats([resolve_run(spec) for spec in runs])
    if as_json:
        print_json(frame)
        return
    if frame.empty:
        console.print(f"no question asked yet in {len(runs)} run(s): the question operators need a model "
                      f"(llm.models in the config, or --model)", soft_wrap=True)
        return
    rows = []
    for row in frame.itertuples(index=False):
        gain = "-" if row.mean_gain is None or row.mean_gain != row.mean_gain else f"{100 * row.mean_gain:+.1f}%"
        rows.append([row.question_id, str(row.asked), str(row.correct), str(row.better), gain,
                     row.text if isinstance(row.text, str) else ""])
    print_table(console, [Column("question", no_wrap=True), *(Column(c, right=True) for c in
                                                                ("asked", "correct", "better", "mean gain")), "text"],
                rows, title=f"questions asked in {len(runs)} run(s)")


@bank.command("review")
@click.argument("run")
@click.option("--accept", "accept", multiple=True, help="Accept a proposed question (repeatable; needs --bank).")
@click.option("--reject", "reject", multiple=True, help="Reject a proposed question (repeatable; needs --bank).")
@click.option("--bank", "bank_dir", type=click.Path(path_type=Path),
              help="User bank directory: accepted questions go there, rejections are listed there.")
def bank_review(run: str, accept: tuple[str, ...], reject: tuple[str, ...], bank_dir: Path | None) -> None:
    """Show the questions the LLM proposed in RUN; accept or reject them into --bank (the run is only read)."""
    from evokernel.bank import review_proposed
    from evokernel.bank.proposals import review_status
    from evokernel.lineage import resolve_run
    from evokernel.output import Column, print_table
    from evokernel.store import open_readonly

    run_dir = resolve_run(run)
    with open_readonly(run_dir) as store:
        for question_id in accept:
            path = review_proposed(store, question_id, True, bank_dir)
            console.print(f"accepted [bold]{question_id}[/] into {path}", soft_wrap=True)
        for question_id in reject:
            path = review_proposed(store, question_id, False, bank_dir)
            console.print(f"rejected [bold]{question_id}[/] (listed in {path})", soft_wrap=True)
        rows = store.proposed_questions()
    if not rows:
        console.print(f"no questions proposed in {run_dir.name}")
        return
    status = review_status(rows, bank_dir)
    print_table(console, [Column("id", no_wrap=True), "status", "after kernel", "triggers", "layers", "text"],
                [[row["id"], status[row["id"]], str(row["from_individual"] or "-"), ", ".join(row["triggers"]),
                  ", ".join(row["layers"]), row["text"]] for row in rows],
                title=f"questions proposed in {run_dir.name}")


if __name__ == "__main__":
    main()
