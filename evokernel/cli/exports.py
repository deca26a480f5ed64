"""A run written out as files: `export` (tables) and `report` (a self-contained HTML page); both read-only."""

from __future__ import annotations

from pathlib import Path

import click

from evokernel.cli.common import console, open_run
from evokernel.errors import BadInput


@click.command()
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="Directory to write individuals, scenario_results and llm_calls into (created).")
def export(run: str, fmt: str, output: Path) -> None:
    """Write the run as tables: OUTPUT/individuals.FMT, OUTPUT/scenario_results.FMT, OUTPUT/llm_calls.FMT,
    OUTPUT/human_questions.FMT (questions asked with `evokernel ask`).

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    if output.exists() and not output.is_dir():
        raise BadInput(f"-o {output}: exists and is not a directory (export writes several tables into a directory)")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise BadInput("--format parquet needs pyarrow, which evokernel depends on: pip install pyarrow") from None
    from evokernel.lineage.export import human_questions_table, individuals_table, llm_calls_table, scenarios_table

    with open_run(run) as lin:
        tables = {"individuals": individuals_table(lin), "scenario_results": scenarios_table(lin),
                  "llm_calls": llm_calls_table(lin), "human_questions": human_questions_table(lin)}
        for name, frame in tables.items():
            path = output / f"{name}.{fmt}"
            try:
                output.mkdir(parents=True, exist_ok=True)
                frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path, index=False)
            except OSError as exc:
                raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
            console.print(f"{path}: {len(frame)} rows", soft_wrap=True, highlight=False)


@click.command()
@click.argument("run")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("report.html"), show_default=True)
@click.option("--top", "top_k", type=click.IntRange(1), default=10, show_default=True,
              help="Kernels shown in the lineage graph and the heatmap.")
def report(run: str, output: Path, top_k: int) -> None:
    """Write a self-contained HTML report of the run (opens offline in any browser).

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    from evokernel.report import write_report

    with open_run(run) as lin:
        write_report(lin, output, top_k)
        console.print(f"wrote {output} ({output.stat().st_size // 1024} KiB): run {lin.name}, "
                      f"{len(lin.individuals)} kernels")
