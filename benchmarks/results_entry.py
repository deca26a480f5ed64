"""A dated entry in an experiment's RESULTS.md: every benchmark writes the same header (title and
time, what was measured where, the exact command line), then its figures."""

from __future__ import annotations

import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path


def append_entry(path: Path, title: str, facts: list[str], body: str) -> None:
    """Append `## title, date`, one line per fact, the command that ran, then `body`."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python " + " ".join(shlex.quote(arg) for arg in sys.argv)
    header = "  \n".join([*facts, f"Command: `{command}`"])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(f"\n## {title}, {stamp}\n\n{header}\n\n{body}\n")
