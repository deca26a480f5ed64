"""Errors that the CLI turns into one-line messages and exit codes."""

from __future__ import annotations

from pathlib import Path


class BadInput(Exception):
    """Input the user must fix (file, task, option, config, run id): the CLI exits with code 2."""


def read_yaml(path: Path) -> object:
    """Parse a YAML file; a syntax error becomes BadInput naming the file and line."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        raise BadInput(f"{path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None
