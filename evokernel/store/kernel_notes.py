"""Notes on a run's kernels: RUN/notes/ID/NOTE.md, each a measurement or a remark that a person or a tool gives
(`evokernel note`): profiler figures the harness does not take, an expert's reading of the code. Every later
prompt about that kernel shows its latest notes, so an answerer works from them too.

Files, not database rows, for the reasons `inbox` gives: the writer never opens the run's database for writing
(a running driver holds it), and a note written under a hidden name and renamed into place appears whole or not
at all, on any node of a shared filesystem.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.store.inbox import write_partial

NOTES_DIR = "notes"
MAX_NOTE_BYTES = 16_384  # a prompt shows a note whole; a profiler's full dump belongs in a file of its own
NOTE_BY = re.compile(r"\A<!-- note by: (.*?) -->\n")


@dataclass(frozen=True)
class KernelNote:
    kernel_id: int
    note_id: str  # when it was written (UTC, to the microsecond) and a random suffix: notes sort oldest first
    by: str | None
    text: str

    @property
    def written(self) -> str:
        """When it was written, to the minute: `2026-12-03 15:44 UTC`."""
        stamp = self.note_id
        return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]} UTC"


def add_note(run_dir: Path, kernel_id: int, text: str, by: str | None = None) -> Path:
    """Put a note on kernel `kernel_id` in one step; BadInput when it is empty or too long for a prompt."""
    size = len(text.encode("utf-8"))
    if not text.strip():
        raise BadInput("the note is empty")
    if size > MAX_NOTE_BYTES:
        raise BadInput(f"the note is {size} bytes; a note is at most {MAX_NOTE_BYTES} (every prompt about the "
                       "kernel shows it whole): keep the figures that matter")
    path = Path(run_dir) / NOTES_DIR / str(kernel_id) / f"{new_note_id()}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"<!-- note by: {' '.join(by.split())} -->\n" if by and by.strip() else ""
    os.replace(write_partial(path, header + text.strip() + "\n"), path)
    return path


def new_note_id() -> str:
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S.%fZ')}-{secrets.token_hex(3)}"


def kernel_notes(run_dir: Path, kernel_id: int, latest: int | None = None) -> list[KernelNote]:
    """The kernel's notes, oldest first (hidden and partial files left out); with `latest`, only the latest that
    many are read."""
    folder = Path(run_dir) / NOTES_DIR / str(kernel_id)
    try:
        names = sorted(entry.name for entry in os.scandir(folder)
                       if entry.name.endswith(".md") and not entry.name.startswith("."))
    except FileNotFoundError:
        return []
    notes = []
    for name in names[-latest:] if latest else names:
        text = (folder / name).read_bytes().decode("utf-8", errors="replace")
        match = NOTE_BY.match(text)
        notes.append(KernelNote(kernel_id, name[:-3], match.group(1) if match else None,
                                text[match.end():] if match else text))
    return notes
