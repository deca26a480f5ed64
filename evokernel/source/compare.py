"""How two kernels' code differs, line by line, with comments, blank lines, spacing and knob values left out:
whether either holds something the other lacks. Two kernels of which one holds the other whole have nothing to
combine (a question crossover of them gives the larger back), and two that differ only in knob values are the
knob crossover's to mix."""

from __future__ import annotations

import difflib
from functools import lru_cache

from evokernel.source.knobs import KNOB_LINE
from evokernel.source.lexer import without_comments


def _code_lines(source: str) -> list[str]:
    """The code's lines without whitespace (as `normalized_hash` reads code); a knob's line keeps its name, not
    its value."""
    code = KNOB_LINE.sub(lambda m: f"#define {m.group('name')} @knob", source)
    return ["".join(line.split()) for line in without_comments(code).splitlines() if line.strip()]


@lru_cache(maxsize=4096)
def each_has_its_own(first: str, second: str) -> bool:
    """Whether each source holds code the other lacks (a line the other has not, or one changed), beyond knob
    values: False where they are the same code or one only adds lines to the other."""
    matcher = difflib.SequenceMatcher(None, _code_lines(first), _code_lines(second), autojunk=False)
    kinds = {tag for tag, *_ in matcher.get_opcodes() if tag != "equal"}
    return bool(kinds) and kinds not in ({"insert"}, {"delete"})
