"""Lint: a bank entry must be a bounded question, not a command, a disguised suggestion or a repeat.

"Make it faster." is open-ended and answered greedily; a question names a hypothesis and leaves
the answer to a measurement. These rules catch the shapes that are plainly not questions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evokernel.bank.questions import Question

MIN_WORDS, MAX_WORDS, MAX_CHARS = 6, 45, 320
SIMILARITY_LIMIT = 0.6  # token-set Jaccard at or above which two questions count as near-duplicates

QUESTION_WORDS = {
    "what", "which", "where", "when", "why", "how", "who", "whose", "whom", "whether",
    "is", "are", "was", "were", "does", "do", "did", "can", "could", "would", "should", "will",
    "has", "have", "had", "may", "might", "must", "shall",
}
LEAD_INS = {"in", "at", "for", "on", "under", "with", "by", "during", "between", "after", "before",
            "across", "if", "while", "given", "compared", "apart", "besides", "beyond", "within", "once", "since"}
COMMAND_WORDS = {
    "make", "optimize", "optimise", "improve", "use", "try", "add", "remove", "rewrite", "replace", "change",
    "fix", "implement", "apply", "ensure", "increase", "reduce", "decrease", "speed", "unroll", "vectorize",
    "vectorise", "tile", "fuse", "consider", "avoid", "switch", "move", "please", "let", "lets", "let's", "go",
    "write", "convert", "put", "keep", "double", "halve", "tune", "check", "measure", "look", "find", "think",
}
SUGGESTION_PATTERNS = [
    r"\bwhy not\b", r"\bhave you (tried|considered|thought)\b", r"\b(what|how) about\b", r"\bplease\b",
    r"\b(can|could|would|will) you\b", r"\bshouldn't you\b", r"\bjust\b",
]
STOPWORDS = {"the", "and", "this", "that", "are", "does", "what", "which", "how", "for", "from", "with",
             "its", "any", "each", "every", "than", "or", "of", "to", "in", "is", "it", "on", "a", "an",
             "be", "by", "you", "your", "there", "their", "one", "more", "into", "only", "at", "do", "as"}


@dataclass(frozen=True)
class Problem:
    """One reason a bank entry fails the lint."""

    file: Path | None
    question_id: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return f"{where}question '{self.question_id}': {self.reason}"


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def shape_problems(text: str) -> list[str]:
    """Why `text` is not a well-formed question (empty when it is one)."""
    words, text = _words(text), text.strip()
    if not words:
        return ["empty text"]
    reasons = []
    first = words[0]
    if first in COMMAND_WORDS:
        reasons.append(f"is a command ('{first} ...'), not a question: ask what to find out, not what to do")
    elif first not in QUESTION_WORDS and not (first in LEAD_INS and QUESTION_WORDS & set(words[1:])):
        reasons.append(f"does not start like a question ('{first} ...'): begin with what/which/how/is/does/...")
    if not text.endswith("?"):
        reasons.append("does not end with '?'")
    for pattern in SUGGESTION_PATTERNS:
        found = re.search(pattern, text.lower())
        if found:
            reasons.append(f"'{found.group(0)}' makes it a suggestion with the answer inside, not a question")
            break
    if len(words) < MIN_WORDS:
        reasons.append(f"too short ({len(words)} words, at least {MIN_WORDS}): name the hypothesis to check")
    if len(words) > MAX_WORDS or len(text) > MAX_CHARS:
        reasons.append(f"too long ({len(words)} words, {len(text)} characters; at most {MAX_WORDS} words, "
                       f"{MAX_CHARS} characters): ask one bounded thing")
    return reasons


def tokens(text: str) -> frozenset[str]:
    """Content words, lightly stemmed, for near-duplicate detection."""
    return frozenset(re.sub(r"(ing|es|s)$", "", w) for w in _words(text) if w not in STOPWORDS and len(w) > 1)


def similarity(a: str, b: str) -> float:
    ta, tb = tokens(a), tokens(b)
    return len(ta & tb) / len(ta | tb) if ta | tb else 1.0


def duplicate_problems(text: str, others: list[Question], own_id: str | None = None) -> list[str]:
    """Why `text` repeats a question in `others` (same or near-same wording)."""
    reasons = []
    for other in others:
        if other.id == own_id:
            continue
        score = similarity(text, other.text)
        if score >= SIMILARITY_LIMIT:
            kind = "duplicates" if score == 1.0 else f"near-duplicates ({score:.2f} similar)"
            reasons.append(f"{kind} question '{other.id}': \"{other.text}\"")
    return reasons


def lint_questions(questions: list[Question], files: dict[str, Path] | None = None) -> list[Problem]:
    """Every problem in a set of questions; each near-duplicate pair is reported once (on the later one)."""
    files = files or {}
    problems = []
    for index, question in enumerate(questions):
        file = files.get(question.id)
        problems += [Problem(file, question.id, r) for r in shape_problems(question.text)]
        problems += [Problem(file, question.id, r) for r in duplicate_problems(question.text, questions[:index])]
        if not question.layers:
            problems.append(Problem(file, question.id, "has no layer tag: name the part of the system it points at"))
    return problems
