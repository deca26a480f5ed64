"""What speedups are measured against, as one value: the task's original kernel, one of the task's library
baselines, or a kernel file. It is parsed once, where the user wrote it (a config's `speed_reference`,
`check --original`), with a one-line error naming that place; the harness, reports, prompts and tables
read its kind, words and column from here instead of re-deriving them from a string."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evokernel.errors import BadInput, read_text
from evokernel.harness.task import Task

ORIGINAL = "original"


@dataclass(frozen=True)
class SpeedReference:
    kind: Literal["original", "library", "file"]
    name: str  # "original", the library baseline's name, or the kernel file's absolute path
    description: str = ""  # a library baseline's own description

    @classmethod
    def parse(cls, text: str, task: Task, where: str = "--original", base_dir: Path | None = None) -> SpeedReference:
        """The reference a user named; a relative file is taken from `base_dir` (a config's folder, like its
        seeds) or the working directory. BadInput naming `where` for anything else (and for the original of a
        task that has none)."""
        if text == ORIGINAL and not task.has_original:
            raise BadInput(f"{where}: task {task.name} has no original kernel: name one of its library baselines "
                           f"({', '.join(task.baselines()) or 'none'}; default {task.default_speed_reference}) "
                           "or a kernel file")
        if text == ORIGINAL or text in task.baselines():
            return cls.recorded(text, task)
        path = Path(text).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            known = ", ".join([*([ORIGINAL] if task.has_original else []), *task.baselines()])
            raise BadInput(f"{where}: '{text}' is neither a baseline of task {task.name} ({known}) "
                           f"nor a kernel file (not found: {path})")
        read_text(path, f"{where}:")
        return cls("file", str(path.resolve()))

    @classmethod
    def recorded(cls, text: str, task: Task | None = None) -> SpeedReference:
        """The reference a stored report or run names (a kernel file is stored by its absolute path and not
        looked at: it may be gone since); `task`, where known, gives a library baseline its description."""
        if text == ORIGINAL:
            return cls("original", ORIGINAL)
        if Path(text).is_absolute():
            return cls("file", text)
        baseline = task.baselines().get(text) if task is not None else None
        return cls("library", text, baseline.description if baseline else "")

    def __str__(self) -> str:
        return self.name  # how configs, reports and the store spell it

    @property
    def built(self) -> bool:
        """A kernel the harness builds (and that writes outputs), as opposed to a library call."""
        return self.kind != "library"

    @property
    def words(self) -> str:
        """In a sentence: what the fitness is a speedup over."""
        if self.kind == "original":
            return "the task's original kernel"
        if self.kind == "file":
            return f"the kernel file {Path(self.name).name}"
        return self.name

    @property
    def described(self) -> str:
        """`words`, with a library baseline's description (a prompt tells the model what it races)."""
        return f"{self.name} ({self.description})" if self.description else self.words

    @property
    def over(self) -> str:
        """After "speedup over"."""
        return {"original": "the original kernel", "file": "the reference kernel"}.get(self.kind, self.name)

    @property
    def column(self) -> str:
        """A table column's header for the reference's times."""
        return {"original": ORIGINAL, "file": Path(self.name).stem}.get(self.kind, self.name)
