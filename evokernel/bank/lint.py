"""Lint: a bank entry must be a bounded question, not a command, a disguised suggestion or a repeat.

"Make it faster." is open-ended and answered greedily; a question names a hypothesis and leaves
the answer to a measurement. These rules catch the shapes that are plainly not questions.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from evokernel.bank.questions import Question

MIN_WORDS, MAX_WORDS, MAX_CHARS = 6, 45, 320
SIMILARITY_LIMIT = 0.6  # token-set Jaccard at or above which two questions count as near-duplicates
MAX_REPORTED = 3  # near-duplicates named per question; more are counted

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
# Words of GPU hardware: a question that uses them is for GPU tasks only (`devices: [gpu]`); asked of a CPU
# task it points at nothing there.
GPU_WORDS = re.compile(r"\b(global memory|shared memory|warps?|tensor cores?|SMs?|streaming multiprocessors?|"
                       r"occupancy|thread ?blocks?|CTAs?|wgmma|TMA|kernel launch(?:es)?|device memory|"
                       r"bank conflicts?|coalesc\w*|HBM|L2 cache)\b", re.IGNORECASE)
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


# Words and phrases that say the same thing, folded before comparing two questions.
PHRASES = [(r"\bfor (?:each|every)\b", "per"), (r"\bshared[- ]memory\b", "smem"), (r"\bglobal memory\b", "gmem"),
           (r"\bthread[- ]blocks?\b", "block"), (r"\bwall[- ]clock\b", "wallclock"),
           (r"\btwo times\b", "twice"), (r"\bhow much\b", "how many")]
SYNONYMS = {
    "maximum": "max", "maxima": "max", "maximal": "max", "maximums": "max", "maxes": "max",
    "minimum": "min", "minima": "min", "minimal": "min", "minimums": "min",
    "exponential": "exp", "exponentials": "exp", "exponent": "exp", "exponents": "exp",
    "calculate": "compute", "calculated": "compute", "calculates": "compute", "calculating": "compute",
    "calculation": "compute", "computation": "compute", "computations": "compute",
    "twice": "two", "doubly": "two", "fp32": "float", "float32": "float", "single-precision": "float",
    "cycle": "clock", "cycles": "clock", "latency": "time", "duration": "time",
    "matmul": "matrix", "gemm": "matrix", "mma": "matrix", "regs": "register", "registers": "register",
    "tiles": "tile", "rows": "row", "columns": "column", "kernels": "kernel", "threads": "thread",
}
STOPWORDS_EXTRA = {"per", "all", "both", "same", "any", "ever", "still", "also", "here", "now"}
# Short forms people write for the same word.
ABBREVIATIONS = {"dim": "dimension", "dims": "dimension", "seq": "sequence", "seqlen": "sequence", "len": "length",
                 "param": "parameter", "params": "parameter", "reg": "register", "mem": "memory",
                 "perf": "performance", "util": "utilization", "occ": "occupancy", "bw": "bandwidth",
                 "addr": "address", "buf": "buffer", "bufs": "buffer", "iter": "iteration", "iters": "iteration"}
# British spellings folded into American ones: vectorise -> vectorize, behaviour -> behavior.
_BRITISH = [(re.compile(r"(?<=\w\w)is(e|ed|es|ing|ation|ations)$"), r"iz\1"), (re.compile(r"(?<=\w)our$"), "or"),
            (re.compile(r"(?<=\w)ours$"), "ors")]


def _american(word: str) -> str:
    for pattern, replacement in _BRITISH:
        word = pattern.sub(replacement, word)
    return word


@lru_cache(maxsize=65536)
def tokens(text: str) -> frozenset[str]:
    """Content words, with synonyms and phrases folded and lightly stemmed, for near-duplicate detection."""
    text = text.lower()
    for pattern, replacement in PHRASES:
        text = re.sub(pattern, replacement, text)
    out = set()
    for word in _words(text):
        word = _american(ABBREVIATIONS.get(word, word))
        word = SYNONYMS.get(word, word)
        if word in STOPWORDS or word in STOPWORDS_EXTRA or len(word) < 2:
            continue
        if len(word) > 4:
            word = re.sub(r"(ing|ed|es|e|s)$", "", word)
        out.add(SYNONYMS.get(word, word))
    return frozenset(out)


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the two questions' token sets (after folding synonyms)."""
    ta, tb = tokens(a), tokens(b)
    return _jaccard(ta, tb)


def _jaccard(ta: frozenset[str], tb: frozenset[str]) -> float:
    return len(ta & tb) / len(ta | tb) if ta | tb else 1.0


def _same_words(a: str, b: str) -> bool:
    return _words(a) == _words(b)


def _describe(text: str, other: Question, score: float) -> str:
    kind = "duplicates" if _same_words(text, other.text) else f"near-duplicates ({score:.2f} similar)"
    return f"{kind} question '{other.id}': \"{other.text}\""


def device_problems(text: str, devices: list[str]) -> list[str]:
    """Why `text` does not fit the devices it would be asked on (a question about GPU hardware asked of CPUs)."""
    gpu_word = GPU_WORDS.search(text)
    if gpu_word and list(devices) != ["gpu"]:
        return [f"speaks of GPU hardware ('{gpu_word.group(0)}') but would be asked of CPU tasks too: give it "
                "devices: [gpu] (--device gpu)"]
    return []


def duplicate_problems(text: str, others: list[Question], own_id: str | None = None) -> list[str]:
    """Why `text` repeats a question in `others` (same or near-same wording, synonyms folded)."""
    mine, reasons = tokens(text), []
    for other in others:
        if other.id == own_id:
            continue
        score = _jaccard(mine, tokens(other.text))
        if score >= SIMILARITY_LIMIT:
            reasons.append(_describe(text, other, score))
    return reasons


def _near_duplicates(questions: list[Question]) -> dict[int, list[tuple[int, float]]]:
    """For each question, the earlier ones at or above SIMILARITY_LIMIT: (index, score).

    A set-similarity join, not a comparison of every pair: identical token sets are grouped, and a
    question is compared only with earlier ones that share a token among the rarest of its tokens (its
    prefix, long enough that two sets this similar must share one) and whose size could reach the limit.
    """
    sets = [tokens(q.text) for q in questions]
    frequency = Counter(token for token_set in set(sets) for token in token_set)
    first_with: dict[frozenset[str], int] = {}
    copies: dict[int, list[int]] = {}  # first question with a token set -> every later one with the same set
    index: dict[str, list[int]] = {}
    found: dict[int, list[tuple[int, float]]] = {}
    for n, token_set in enumerate(sets):
        if token_set in first_with:  # the same words as an earlier question: named against the first only
            found[n] = [(first_with[token_set], 1.0)]
            copies[first_with[token_set]].append(n)
            continue
        first_with[token_set], copies[n] = n, [n]
        ordered = sorted(token_set, key=lambda t: (frequency[t], t))
        prefix = ordered[:len(ordered) - math.ceil(SIMILARITY_LIMIT * len(ordered)) + 1]
        candidates = {m for token in prefix for m in index.get(token, ())}
        matches = []
        for m in sorted(candidates):
            other = sets[m]
            if SIMILARITY_LIMIT * len(token_set) <= len(other) <= len(token_set) / SIMILARITY_LIMIT:
                score = _jaccard(token_set, other)
                if score >= SIMILARITY_LIMIT:
                    matches += [(copy, score) for copy in copies[m]]
        if matches:
            found[n] = sorted(matches)
        for token in prefix:
            index.setdefault(token, []).append(n)
    return found


def lint_questions(questions: list[Question], files: dict[str, Path] | None = None) -> list[Problem]:
    """Every problem in a set of questions; each near-duplicate pair is reported once (on the later one)."""
    files = files or {}
    problems = []
    duplicates = _near_duplicates(questions)
    for index, question in enumerate(questions):
        file = files.get(question.id)
        problems += [Problem(file, question.id, r) for r in shape_problems(question.text)]
        matches = duplicates.get(index, [])
        problems += [Problem(file, question.id, _describe(question.text, questions[m], score))
                     for m, score in matches[:MAX_REPORTED]]
        if len(matches) > MAX_REPORTED:
            more = len(matches) - MAX_REPORTED
            problems.append(Problem(file, question.id, f"also near-duplicates {more} more questions"))
        if not question.layers:
            problems.append(Problem(file, question.id, "has no layer tag: name the part of the system it points at"))
        problems += [Problem(file, question.id, r) for r in device_problems(question.text, question.devices)]
    return problems
