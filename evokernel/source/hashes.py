"""The hashes that name and deduplicate kernel sources: the exact text's (a source's file name in a run) and
the code's without comments and whitespace (kernels that differ only there are one kernel to the search)."""

from __future__ import annotations

import hashlib
import re

from evokernel.source.lexer import without_comments


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def normalized_hash(source: str) -> str:
    """Hash of the source without comments and whitespace: identical kernels share it.

    Knob comments (`// @knob ...`) are dropped like any comment; the knob values stay in the code.
    """
    return hashlib.sha256(re.sub(r"\s+", "", without_comments(source)).encode()).hexdigest()[:16]
