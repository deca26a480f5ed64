"""Turn an LLM answer into a child source: a full file in a fenced block, or SEARCH/REPLACE edits.

Answers are messy (fences inside fences, trailing spaces, changed indentation, truncation), so the
parser is lenient about layout and strict about meaning: an edit whose SEARCH text is not in the
parent, or an answer with no code at all, raises ProposalFailed; the prose around the code is kept
for the declared-limit check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evokernel.mutations import ProposalFailed
from evokernel.source import normalized_hash

FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
EDIT = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[^\n]*\n(.*?)^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9}[ \t]*REPLACE[^\n]*$",
                  re.DOTALL | re.MULTILINE)
LIMIT_CLAIMS = re.compile(
    r"\b(already (optimal|at (the|its) (limit|roofline|peak))|is (now )?optimal|at the (hardware |memory |compute )?limit"
    r"|cannot be (further |meaningfully )?(improved|optimi[sz]ed|made faster)|can(no|')t be (further |meaningfully )?"
    r"(improved|optimi[sz]ed|made faster)|no (further|more) (improvement|optimi[sz]ation|speedup)s? (is |are )?"
    r"(possible|available|left)|nothing (left|more) to (improve|optimi[sz]e|gain)|(the )?(kernel|work) is done)\b",
    re.IGNORECASE)

CHANGE_LINE = re.compile(r"^[ \t]*(?:[-*][ \t]*|\d+\.[ \t]*)?[*_`]*change[*_`]*[ \t]*:[*_`]*[ \t]*(\S.*)$",
                         re.IGNORECASE | re.MULTILINE)
CHANGE_SHOWN = 320  # characters of an answer's stated change that later prompts are told of (200 cut ideas mid-sentence)
# ... where its child beat its parent: an answerer porting a gain from another line had only its first 320
# characters (the lazy-max warp vote of #194, rebuilt from a cut line); losses need only enough not to repeat them
CHANGE_SHOWN_GAINED = 1600
# A stated change that declares the kernel left as it is: the word alone or followed by its reason ("none - ...",
# "None. The tail ...", "none (...)"); "nothing but the tile" states a change.
NO_CHANGE = re.compile(r"(?:none|no change|nothing)[*_`]*(?:\s*$|\s*[.;:,(\u2014\u2013-])", re.IGNORECASE)
NO_CODE = "no code block and no SEARCH/REPLACE edits in the answer"


@dataclass
class ParsedAnswer:
    """The child source and what else the answer said."""

    source: str
    mode: str  # "full", "edits", or "none" (no code: the answer declared a limit)
    prose: str  # the answer without its code and edit blocks
    declared_limit: bool  # the prose claims a limit, or the code is the parent's


def _strip_fences(text: str) -> str:
    """Text of an edit block, without fence lines a model may have wrapped around it."""
    lines = [line for line in text.splitlines() if not re.fullmatch(r"[ \t]*(```+|~~~+)[\w+#.-]*[ \t]*", line)]
    return "\n".join(lines)


def _locate(haystack: str, needle: str) -> tuple[int, int] | None:
    """Span of `needle` in `haystack`: exactly, else line by line ignoring indentation and trailing space."""
    if needle and needle in haystack:
        start = haystack.index(needle)
        return start, start + len(needle)
    wanted = [line.strip() for line in needle.splitlines()]
    while wanted and not wanted[0]:
        wanted.pop(0)
    while wanted and not wanted[-1]:
        wanted.pop()
    if not wanted:
        return None
    lines = haystack.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    stripped = [line.strip() for line in lines]
    for i in range(len(lines) - len(wanted) + 1):
        if stripped[i:i + len(wanted)] == wanted:
            end = offsets[i + len(wanted)]
            if lines[i + len(wanted) - 1].endswith("\n"):
                end -= 1
            return offsets[i], end
    return None


def apply_edits(parent: str, edits: list[tuple[str, str]]) -> str:
    """Apply SEARCH/REPLACE pairs in order; each SEARCH must be found in the text as edited so far."""
    source = parent
    for number, (search, replace) in enumerate(edits, 1):
        search, replace = _strip_fences(search).rstrip("\n"), _strip_fences(replace).rstrip("\n")
        span = _locate(source, search)
        if span is None:
            first = next((line.strip() for line in search.splitlines() if line.strip()), "")
            raise ProposalFailed(f"edit {number}: SEARCH text not found in the parent (starts '{first[:60]}')")
        source = source[:span[0]] + replace + source[span[1]:]
    return source


def parse_answer(answer: str | None, parent_source: str, may_keep_parent: bool = True) -> ParsedAnswer:
    """The child source an answer describes; ProposalFailed when there is none. `may_keep_parent`: whether an
    answer may declare the parent left as it is (not for a first kernel, which has no parent to keep)."""
    if not answer or not answer.strip():
        raise ProposalFailed("empty answer")
    edits = [(m.group(1), m.group(2)) for m in EDIT.finditer(answer)]
    blocks = [m.group(3) for m in FENCE.finditer(answer) if m.group(3).strip()]
    if edits:
        source, mode, prose = apply_edits(parent_source, edits), "edits", FENCE.sub(" ", EDIT.sub(" ", answer))
    elif blocks:
        source, mode, prose = max(blocks, key=len).strip("\n") + "\n", "full", FENCE.sub(" ", answer)
    elif may_keep_parent and (claims_limit(answer) or NO_CHANGE.match(stated_change(answer) or "")):
        return ParsedAnswer(parent_source, "none", answer, declared_limit=True)
    elif may_keep_parent:
        raise ProposalFailed(f"{NO_CODE} (one that changes nothing says `Change: none` and why)")
    else:
        raise ProposalFailed(NO_CODE)
    unchanged = normalized_hash(source) == normalized_hash(parent_source)
    return ParsedAnswer(source, mode, prose, declared_limit=unchanged or claims_limit(prose))


def claims_limit(prose: str) -> bool:
    """Whether the answer's prose declares the kernel optimal, at a limit, or done."""
    return bool(LIMIT_CLAIMS.search(prose))


def stated_change(answer: str | None, limit: int = CHANGE_SHOWN) -> str | None:
    """The answer's one-line `Change: ...` outside its code (the answer format asks for it), shortened to `limit`
    characters: what a later prompt says was tried, so that answerers about the same line do not repeat it (or
    port it, where it gained). None if not stated."""
    match = CHANGE_LINE.search(FENCE.sub(" ", EDIT.sub(" ", answer or "")))
    if not match:
        return None
    text = " ".join(match.group(1).split()).strip("*_` ")
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."
