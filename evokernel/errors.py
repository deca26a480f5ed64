"""Errors that the CLI turns into one-line messages and exit codes."""

from __future__ import annotations

from pathlib import Path


class BadInput(Exception):
    """Input the user must fix (file, task, option, config, run id): the CLI exits with code 2."""


def read_text(path: Path, what: str = "") -> str:
    """A file's text; a file that is not UTF-8 is BadInput naming it and the first bad byte."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        label = f"{what} {path}" if what else str(path)
        raise BadInput(f"{label}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, offset {exc.start}); "
                       "save it as UTF-8") from None


def read_yaml(path: Path) -> object:
    """Parse a YAML file; a syntax error, a byte that is not UTF-8 or a value YAML cannot hold (a number of
    thousands of digits) becomes BadInput naming the file (and the line, where YAML says it)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_yaml_int(self, node):
            try:
                return super().construct_yaml_int(node)
            except ValueError:  # more digits than Python converts: left as text, for validation to name
                return self.construct_scalar(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    text = read_text(path)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        raise BadInput(f"{path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit for conversions
        raise BadInput(f"{path}: a value YAML cannot read ({str(exc).splitlines()[0][:120]})") from None
