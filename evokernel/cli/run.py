"""`evokernel run`: a search from a config (or a resumed run), its live display and its outcome."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from evokernel.cli.common import console, warn_if_not_isolated
from evokernel.errors import BadInput


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
                 "--wall-time": "budget.wall_time_s", "--usd": "budget.usd", "--budget": "budget.evaluations",
                 "--model": "llm.models.0", "--seed-kernel": "seeds"}


def _with_task(data: dict, spelling: str) -> str:
    """Point a config's settings at the task `--task` names (a built-in name, or a task directory relative to the
    working directory, as `check --task` takes it): its original kernel is the seed, its speed reference the
    config's when the task has it (else the task's default: its original, or its first library baseline), its
    scenarios the config's set when the task has one of that name (else `quick`, else its first). Returns the task
    as the config then holds it."""
    from evokernel.harness import get_task, task_names

    task = get_task(spelling)  # one line for an unknown name or a broken task directory
    data["task"] = task.name if spelling in task_names() else str(task.directory)
    data["seeds"] = []
    if data.get("speed_reference") not in [*(["original"] if task.has_original else []), *task.baselines()]:
        data["speed_reference"] = task.default_speed_reference
    if data.get("scenarios") not in task.scenario_sets:
        data["scenarios"] = "quick" if "quick" in task.scenario_sets else next(iter(task.scenario_sets))
    data["name"] = task.name
    return data["task"]


def _run_config(config_path: Path | None, resume: Path | None, model: str | None, api_base: str | None,
                budget: int | None, address: str | None, scenarios: str | None = None, random_seed: int | None = None,
                population: int | None = None, wall_time: str | None = None, usd: float | None = None,
                task: str | None = None, seed_kernels: tuple[Path, ...] = ()):
    """The config of a new or resumed run, with the command-line overrides applied and validated."""
    from evokernel.config import load_config, parse_config
    from evokernel.defaults import default_config_path

    if resume is not None:
        if config_path is not None:
            raise BadInput("give either CONFIG or --resume RUN_DIR (a resumed run keeps its own config)")
        fixed = [name for name, value in (("--task", task), ("--seed-kernel", seed_kernels)) if value]
        if fixed:
            raise BadInput(f"{', '.join(fixed)}: a resumed run keeps its own task and seeds")
        config_path = resume / "config.yaml"
        if not config_path.is_file():
            raise BadInput(f"--resume {resume}: not a run directory (no config.yaml)")
    elif config_path is None:
        if task is not None:
            from evokernel.harness import get_task, profile_of

            config_path = default_config_path(gpu=profile_of(get_task(task).backend).device_kind == "gpu")
        else:
            config_path = default_config_path()
        console.print(f"[dim]no CONFIG given: using the embedded default {config_path.name}[/]")
    config = load_config(config_path, resumed=resume is not None)
    data = config.model_dump(mode="json", by_alias=True)
    given = {}
    if task is not None:
        _with_task(data, task)
    if seed_kernels:
        missing = next((path for path in seed_kernels if not path.is_file()), None)
        if missing is not None:
            raise BadInput(f"--seed-kernel {missing}: file not found")
        data["seeds"] = [str(path.resolve()) for path in seed_kernels]
        given["--seed-kernel"] = " ".join(map(str, seed_kernels))
    if model:
        data["llm"]["models"] = [{"model": model, "api_base": api_base}]
        given["--model"] = model
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
        return parse_config(data, f"{config_path} (with command-line options)", resumed=resume is not None)
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
    from evokernel.mutations import llm_operator_names

    weights = config.operators.as_dict()
    if not config.llm.models or not any(weights.get(name, 0) > 0 for name in llm_operator_names()):
        return
    from evokernel.mutations.answer_cache import replay_answers
    from evokernel.mutations.llm import LLMClient, all_models, check_prices

    if config.llm.replay_from is not None:
        replay_answers(config.llm.replay_from)  # one line when there is nothing to replay
        return
    check_prices(config)
    if check:
        console.print(f"[dim]checking {len(all_models(config.llm))} model(s) with one short call each "
                      "(skip with --no-llm-check)[/]")
        LLMClient(config.llm).check()


def _progress_table(stats) -> Table:
    from rich.text import Text

    from evokernel.lineage.statistics import describe_proposal_failures

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
    table.add_row("skipped", f"{stats.duplicates} duplicates")
    table.add_row("failed proposals", Text(describe_proposal_failures(stats.proposal_failures) or "none"))
    busy = "-" if stats.busy_fraction is None else f"{100 * stats.busy_fraction:.0f}%"
    table.add_row("workers busy", f"{busy} of {stats.slots} evaluation slot(s)")
    table.add_row("LLM cost", f"${stats.cost_usd:.2f}" if stats.llm else "no model")
    table.add_row("elapsed", f"{stats.elapsed_s:.0f} s")
    if stats.last:
        table.add_row("last", Text(stats.last))  # may quote a compiler or an LLM: not markup
    return table


def _log_line(stats) -> str:
    best = "-" if stats.best_id is None else f"{stats.best_fitness:.3f} (#{stats.best_id})"
    busy = "-" if stats.busy_fraction is None else f"{100 * stats.busy_fraction:.0f}%"
    return (f"[{stats.evaluations}{'/' + str(stats.budget) if stats.budget else ''}] best {best} · busy {busy}"
            f" · rejected {sum(stats.failures.values())} · duplicates {stats.duplicates}"
            f" · failed proposals {sum(stats.proposal_failures.values())}"
            + (f" · ${stats.cost_usd:.2f}" if stats.llm else "") + f" · {stats.last or ''}")


def _print_outcome(result, run_dir: Path, speed_reference: str) -> None:
    from evokernel.harness import SpeedReference
    from evokernel.lineage.statistics import describe_proposal_failures, proposal_failure_counts
    from evokernel.store import Store

    stats = result.stats
    with Store(run_dir, readonly=True) as store:
        failed_proposals = proposal_failure_counts(store)
    screened = f" ({stats.screened} screened against reused reference times)" if stats.screened else ""
    console.print(f"\nrun {result.status}: {result.reason} · {stats.evaluations} evaluations{screened}, "
                  f"{sum(stats.failures.values())} rejected, {stats.duplicates} duplicates skipped, "
                  f"{sum(failed_proposals.values())} failed proposals", soft_wrap=True, markup=False)
    if failed_proposals:
        console.print(f"failed proposals (operator: reason ×count): {describe_proposal_failures(failed_proposals)}",
                      soft_wrap=True, markup=False, highlight=False)
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
    if best.operator == "seed" or best.id == stats.seed_id:
        over_seed = ", a seed: no kernel of the search beat it"
    elif stats.seed_fitness:
        over_seed = (f", {best.fitness / stats.seed_fitness:.3f}x the seed (individual {stats.seed_id})"
                     + (" in the search" if retime else ""))
    console.print(f"[bold green]best kernel[/]: individual {best.id} ({best.operator}), geomean speedup "
                  f"{best.fitness:.3f} over {SpeedReference.recorded(speed_reference).words}{over_seed}", soft_wrap=True)
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


@click.command()
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
@click.option("--task", "task", help="Search this task instead of the config's: a built-in name or a task directory "
                                     "(its original kernel is the seed; without CONFIG, the embedded config of its "
                                     "device kind supplies the rest).")
@click.option("--seed-kernel", "seed_kernels", multiple=True, type=click.Path(path_type=Path),
              help="A seed kernel file instead of the config's seeds (or the task's original); repeatable.")
@_resumable
def run(config_path: Path | None, model: str | None, api_base: str | None, budget: int | None,
        address: str | None, resume: Path | None, runs_dir: Path, replay: Path | None, no_llm_check: bool,
        scenarios: str | None, random_seed: int | None, population: int | None, wall_time: str | None,
        usd: float | None, task: str | None, seed_kernels: tuple[Path, ...]) -> None:
    """Evolve kernels: CONFIG (default: the embedded CPU or GPU config; with --task, the one for the task's
    device) on a local Ray instance or a cluster."""
    from rich.live import Live

    from evokernel.search import Search, new_run_dir

    config = _run_config(config_path, resume, model, api_base, budget, address, scenarios=scenarios,
                         random_seed=random_seed, population=population, wall_time=wall_time, usd=usd,
                         task=task, seed_kernels=seed_kernels)
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
                    notify=lambda line: console.print(line, soft_wrap=True, markup=False))
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
