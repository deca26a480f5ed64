"""Knobs: tunable constants marked in a kernel's source.

A knob is a line `#define NAME VALUE  // @knob v1,v2,v3`: VALUE must be one of the listed values. Parsed
here, below every layer that reads them (the store's rows, a run's directory, prompts, the knob operators
in `evokernel.mutations.operators.knobs`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

KNOB_LINE = re.compile(r"^(?P<head>[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+)(?P<value>[^\s/]+)"
                       r"(?P<tail>[ \t]*//[ \t]*@knob\b[ \t]*(?P<values>[^\n]*))$", re.MULTILINE)
KNOB_MARK = re.compile(r"//[ \t]*@knob\b")


class KnobError(ValueError):
    """A knob line that cannot be used (the message names the line and why)."""


@dataclass(frozen=True)
class Knob:
    name: str
    value: str
    values: tuple[str, ...]
    line: int  # 1-based line of the #define


KNOB_HINT = "a knob is a constant marked `#define NAME VALUE  // @knob v1,v2,...`"


def tunable(knobs: dict[str, Knob]) -> bool:
    """Whether the knob operators have something to change in a source with these knobs: one listing more than one
    value."""
    return any(len(knob.values) > 1 for knob in knobs.values())


def parse_knobs(source: str) -> dict[str, Knob]:
    """All knobs of a source, in order; raises KnobError for a malformed or inconsistent knob."""
    knobs: dict[str, Knob] = {}
    matched_lines = set()
    for match in KNOB_LINE.finditer(source):
        line = source.count("\n", 0, match.start()) + 1
        matched_lines.add(line)
        name, value = match["name"], match["value"]
        values = tuple(v.strip() for v in match["values"].split(","))
        if not match["values"].strip() or any(not v or re.search(r"\s", v) for v in values):
            raise KnobError(f"line {line}: knob {name} lists no usable values ('{match['values'].strip()}'); "
                            "expected '// @knob v1,v2,...'")
        if len(set(values)) != len(values):
            raise KnobError(f"line {line}: knob {name} lists a value twice ({','.join(values)})")
        if value not in values:
            raise KnobError(f"line {line}: knob {name} has default {value}, which is not one of its values "
                            f"{','.join(values)}")
        if name in knobs:
            raise KnobError(f"line {line}: knob {name} is defined twice (first on line {knobs[name].line})")
        knobs[name] = Knob(name, value, values, line)
    for number, text in enumerate(source.splitlines(), 1):
        if number not in matched_lines and KNOB_MARK.search(text):
            raise KnobError(f"line {number}: '@knob' comment is not on a '#define NAME VALUE' line")
    return knobs


def knob_values(source: str) -> dict[str, str]:
    """Current knob values of a source ({} when it has none or they cannot be parsed)."""
    try:
        return {name: knob.value for name, knob in parse_knobs(source).items()}
    except KnobError:
        return {}


def set_knobs(source: str, values: dict[str, str]) -> str:
    """The source with the given knobs set; every value must be one the knob allows."""
    knobs = parse_knobs(source)
    for name, value in values.items():
        if name not in knobs:
            raise KnobError(f"no knob {name} in the source")
        if str(value) not in knobs[name].values:
            raise KnobError(f"knob {name} does not allow {value} (allowed: {','.join(knobs[name].values)})")

    def replace(match: re.Match) -> str:
        value = values.get(match["name"], match["value"])
        return f"{match['head']}{value}{match['tail']}"

    return KNOB_LINE.sub(replace, source)
