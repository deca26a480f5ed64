"""How the commands print tables and machine-readable output.

On a terminal a table is a rich table. When the output is piped or redirected it is one line per
row, cells separated by tabs, after a header line, with nothing folded or cut (so `grep`, `cut` and
`pandas.read_csv(sep="\\t")` work on it). `--json` output is complete and never shortened.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

Cell = str | Text | int | float | None


@dataclass(frozen=True)
class Column:
    """A table column: its header, right-aligned (numbers) or not, never wrapped on a terminal."""

    name: str
    right: bool = False
    no_wrap: bool = False


def plain(cell: Cell) -> str:
    """A cell as one line of plain text (tabs and line breaks become spaces)."""
    text = cell.plain if isinstance(cell, Text) else "" if cell is None else str(cell)
    return re.sub(r"[\t\r\n]+", " ", text)


def print_table(console: Console, columns: Iterable[Column | str], rows: Iterable[Iterable[Cell]],
                title: str | None = None, box=None) -> None:
    """A rich table on a terminal; otherwise a tab-separated header line and one line per row.

    String cells are shown as they are (no rich markup); pass `rich.text.Text` to colour a cell.
    """
    columns = [c if isinstance(c, Column) else Column(c) for c in columns]
    if not console.is_terminal:
        click.echo("\t".join(plain(c.name) for c in columns))
        for row in rows:
            click.echo("\t".join(plain(cell) for cell in row))
        return
    table = Table(title=title) if box is None else Table(title=title, box=box)
    for column in columns:
        table.add_column(column.name, justify="right" if column.right else "left", no_wrap=column.no_wrap,
                         overflow="fold")
    for row in rows:
        table.add_row(*[cell if isinstance(cell, Text) else Text(plain(cell)) for cell in row])
    console.print(table)


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def within_noise(speedup: float | None, spread: float | None) -> bool:
    """Whether a scenario's gain (or loss) is smaller than its measured spread: not a measured difference."""
    return speedup is not None and spread is not None and spread > abs(speedup - 1)


def scenario_table(scenarios: Iterable[Mapping[str, Any]], reference: str = "original"
                   ) -> tuple[list[Column], list[list[Cell]]]:
    """The columns and cells of per-scenario results, as every command and the HTML report show them.

    `scenarios` are a check report's scenarios (as dicts) or a run's stored rows. How far from the
    reference a kernel is: its max error over the tolerance where the tolerance is known (a check),
    else its relative error (a run keeps no tolerance). Library baselines get a column each when timed.
    The ok cell is coloured; `plain(cell)` gives the text of any cell.
    """
    scenarios = list(scenarios)
    by_tolerance = any(s.get("tolerance") is not None for s in scenarios)
    baselines = sorted({name for s in scenarios for name in s.get("baselines_ms") or {}})
    columns = [Column("scenario"), *(Column(name, right=True) for name in (
        "ok", "max err / tol" if by_tolerance else "rel err", "time ms", f"{reference} ms", "speedup", "spread",
        *(f"{name} ms" for name in baselines))), Column("error")]
    rows: list[list[Cell]] = []
    for s in scenarios:
        if not by_tolerance:
            error = _number(s.get("rel_err"), ".2e")
        elif s.get("max_err") is not None and s.get("tolerance"):
            error = f"{s['max_err'] / s['tolerance']:.2f}"
        else:
            error = "-"
        speedup = Text(_number(s.get("speedup"), ".3f"))
        if s.get("suspicious"):
            speedup.append(" below the roofline", style="red")
        elif within_noise(s.get("speedup"), s.get("spread")):
            speedup.append(" within noise", style="yellow")
        rows.append([s["name"], Text("yes", style="green") if s["correct"] else Text("NO", style="red"), error,
                     _number(s.get("time_ms"), ".4f"), _number(s.get("original_time_ms"), ".4f"), speedup,
                     "-" if s.get("spread") is None else f"{100 * s['spread']:.1f}%",
                     *(_number((s.get("baselines_ms") or {}).get(name), ".4f") for name in baselines),
                     s.get("error") or ""])
    return columns, rows


def jsonable(value: Any) -> Any:
    """Plain JSON values: NaN becomes null, numpy scalars numbers, paths strings, frames lists of records."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return jsonable(value.to_dict("records"))
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout."""
    click.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))
