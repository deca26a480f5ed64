"""What the `evokernel` commands share: the console, the error handling of bad input, number formats,
the --json flag and opening a run.

Bad input exits with code 2 and a one-line message; a rejected kernel exits with 1.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console

from evokernel.errors import BadInput

console = Console()


def print_code(text: str, lexer: str, line_numbers: bool = False) -> None:
    """Source or a diff: highlighted on a terminal; piped, the text exactly as it is (not folded at the
    console's width, no padding), so that a saved diff applies with `patch` and a saved source compiles."""
    if console.is_terminal:
        from rich.syntax import Syntax

        console.print(Syntax(text, lexer, line_numbers=line_numbers, word_wrap=True))
    else:
        console.file.write(text if text.endswith("\n") else text + "\n")
        console.file.flush()


class Group(click.Group):
    """Turns BadInput anywhere below, and a command's bad options or arguments, into one line `error: ...`
    and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else ctx.command_path
            click.echo(f"error: {where}: {exc.format_message()} (see {where} --help)", err=True)
            sys.exit(2)


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON (complete, machine-readable) instead.")


def warn_if_not_isolated() -> str:
    """Say at the start of a check or run how candidates are isolated here, loudly when they are not."""
    from evokernel.harness import isolation

    box = isolation()
    if not box.enforced:
        console.print(f"[bold yellow]warning[/]: candidate kernels are {box.describe()}", soft_wrap=True)
    return box.describe()


def open_run(run: str):
    """The run named on the command line (a directory, a run id under ./runs, or 'latest'), read-only."""
    from evokernel.lineage import Lineage

    return Lineage.open(run)
