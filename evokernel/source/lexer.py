"""C and CUDA source as a compiler's later phases see it: lines spliced, comments blanked, string and
character literals blanked (their text kept aside), with a map back to the author's line numbers, so
that the static guard's word scans see code only; and the source with only its comments blanked, which
the normalized hash reads. One definition of a comment and of a literal serves both.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

# Linear time: no pattern starts with an optional part, a look-behind or \b (Python then tries every
# position at full cost; word boundaries are checked on the few hits instead), no pattern can span
# newlines at a line start (^\s* made the old scan quadratic), and every alternative that may be left
# unterminated ends at the end of the line or the input, so no text is scanned from two starts.

_SPLICE_RE = re.compile(r"\\[ \t\f\v]*\n")
_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*(?:"|(?=\n)|\\?\Z)')
_CHAR_RE = re.compile(r"'(?:[^'\\\n]|\\.)*(?:'|(?=\n)|\\?\Z)")
_COMMENT = r"(?://[^\n]*|/\*.*?(?:\*/|\Z))"
_COMMENT_RE = re.compile(_COMMENT, re.DOTALL)
# a run of comments and the blanks between them, replaced at once (a file of comment lines is one run)
_COMMENT_RUN_RE = re.compile(rf"{_COMMENT}(?:[ \t\n\f\v]*{_COMMENT})*", re.DOTALL)
_RAW_RE = re.compile(r'(?:u8|[uUL])?R"(?P<delim>[^()\\ \t\f\v\n"]{0,16})\((?P<body>.*?)(?:\)(?P=delim)"|\Z)', re.DOTALL)
_RAW_PREFIXES = ("u8R", "uR", "UR", "LR", "R")
_NUMBER_RE = re.compile(r"(?:\d|\.\d)(?:[eEpP][+-]|'[\w$]|[\w$.])*")  # a C++ pp-number: 1'000 is one
# where a token that the lexer must see may start (C++ adds numbers, for their digit separators)
_CANDIDATE_RE = {"c": re.compile(r"""[/"']"""), "cuda": re.compile(r"""[/"'\d]|\.\d""")}
_WORD_RUN_RE = re.compile(r"[\w$]*")
_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]+|[0-7]{1,3}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b"}


def _unescape(match: re.Match) -> str:
    body = match.group(1)
    if body[0] in "xuU" and len(body) > 1:
        return chr(min(int(body[1:], 16), 0x10FFFF))
    if body[0] in "01234567":
        return chr(int(body, 8))
    return _SIMPLE_ESCAPES.get(body, body)


def is_word_char(char: str) -> bool:
    return char.isalnum() or char in "_$"


@dataclass
class Lexed:
    """The source as the compiler's later phases see it: lines spliced, each comment one space,
    each string literal `""` (its text kept aside, by position), each character literal `''`."""

    code: str
    literals: dict[int, str] = field(default_factory=dict)  # position of `""` in code -> the literal's text
    out_marks: list[int] = field(default_factory=list)  # checkpoints: a position in code ...
    text_marks: list[int] = field(default_factory=list)  # ... and the same place in the spliced text
    text: str = ""  # the source with lines spliced
    splices: list[int] = field(default_factory=list)  # positions in `text` where a line was joined

    def line(self, position: int) -> int:
        """The author's line number of a position in `code` (O(n): call it for the reason only)."""
        i = bisect.bisect_right(self.out_marks, position) - 1
        at = self.text_marks[i] + (position - self.out_marks[i]) if i >= 0 else position
        return self.text.count("\n", 0, at) + bisect.bisect_right(self.splices, at) + 1


def lex(source: str, language: str) -> Lexed:
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    splices, pieces, start, joined = [], [], 0, 0
    for match in _SPLICE_RE.finditer(source):
        pieces.append(source[start:match.start()])
        joined += match.start() - start
        splices.append(joined)
        start = match.end()
    pieces.append(source[start:])
    text = "".join(pieces)
    lexed = Lexed("", text=text, splices=splices)
    candidates, out, length, last, position = _CANDIDATE_RE[language], [], 0, 0, 0
    while match := candidates.search(text, position):
        at, char = match.start(), match.group()[0]
        glued = at > 0 and is_word_char(text[at - 1])
        replacement = literal = None
        if char == "/":
            token = _COMMENT_RUN_RE.match(text, at)
            if token:
                replacement = _COMMENT_RE.sub(" ", token.group())  # keeps the newlines between comments
        elif char == '"':
            prefix = next((p for p in _RAW_PREFIXES if language == "cuda" and text.endswith(p, 0, at)
                           and (at == len(p) or not is_word_char(text[at - len(p) - 1]))), None)
            token = _RAW_RE.match(text, at - len(prefix)) if prefix else None
            if token:
                at, literal, replacement = token.start(), token.group("body"), 'R""'  # no header name, no label
            else:
                token = _STRING_RE.match(text, at)
                literal, replacement = _ESCAPE_RE.sub(_unescape, token.group()[1:].removesuffix('"')), '""'
        elif char == "'":
            token, replacement = _CHAR_RE.match(text, at), "''"
        else:  # a C++ number, or digits inside an identifier (x1'a' is x1 then 'a')
            token = (_WORD_RUN_RE if glued else _NUMBER_RE).match(text, at)
        if replacement is None:
            position = max(token.end(), at + 1) if token else at + 1
            continue
        out.append(text[last:at])
        length += at - last
        if literal is not None:
            lexed.literals[length + len(replacement) - 2] = literal
        out.append(replacement)
        length += len(replacement)
        lexed.out_marks.append(length)
        lexed.text_marks.append(token.end())
        last = position = token.end()
    out.append(text[last:])
    lexed.code = "".join(out)
    return lexed


_SLASH_OR_QUOTE_RE = re.compile(r"""[/"']""")


def without_comments(source: str) -> str:
    """The source with each comment one space and everything else as written (literals keep a `//` in them)."""
    out, last, position = [], 0, 0
    while match := _SLASH_OR_QUOTE_RE.search(source, position):
        at, char = match.start(), match.group()
        if char == "/":
            token = _COMMENT_RE.match(source, at)
            if token:
                out += [source[last:at], " "]
                last = token.end()
        else:
            token = (_STRING_RE if char == '"' else _CHAR_RE).match(source, at)
        position = max(token.end(), at + 1) if token else at + 1
    out.append(source[last:])
    return "".join(out)


def search_word(pattern: re.Pattern, code: str, start: int = 0) -> re.Match | None:
    """The first match of `pattern` that starts a word (the pattern itself has no leading \b)."""
    while True:
        match = pattern.search(code, start)
        if not match or match.start() == 0 or not is_word_char(code[match.start() - 1]):
            return match
        start = match.start() + 1


def word_pattern(pattern: str) -> re.Pattern:
    return re.compile(pattern.removeprefix(r"\b"))
