"""Which runs a server shows: one run, or every run under a runs directory, and how a run id taken from a URL
becomes a directory: only a direct child of that directory holding a lineage database, so no path outside it
can be reached through a URL."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.store import DB_NAME, iter_runs, open_readonly, resolve_run


class UnknownRun(BadInput):
    """A run id that names no run this server shows (the page answers 404)."""


@dataclass(frozen=True)
class ServedRuns:
    """The runs directory a server shows (`root`), and the one run it is limited to, when it was started on a run."""

    root: Path
    only: str | None = None

    @classmethod
    def from_spec(cls, spec: str | Path) -> "ServedRuns":
        """A run (a run directory, a run id under ./runs, 'latest') or a directory of runs; BadInput otherwise (also
        for a run whose database cannot be read)."""
        path = Path(spec)
        if path.is_dir() and not (path / DB_NAME).is_file() and any(path.glob(f"*/{DB_NAME}")):
            return cls(path.resolve())
        try:
            run_dir = resolve_run(spec).resolve()
        except BadInput:
            if path.is_dir():
                raise BadInput(f"{spec} is neither a run ({DB_NAME} not found in it) nor a directory of runs (no "
                               f"*/{DB_NAME} under it)") from None
            raise BadInput(f"no run or runs directory '{spec}': neither a directory nor a run id under ./runs") from None
        open_readonly(run_dir).close()  # a damaged database is refused here, in one line, before serving
        return cls(run_dir.parent, run_dir.name)

    def ids(self) -> list[str]:
        """The run ids shown, newest first."""
        return [self.only] if self.only else [path.name for path in iter_runs(self.root) if path != self.root]

    def run_dir(self, run_id: str) -> Path:
        """The directory of a run shown here; UnknownRun for anything else (a path, '..', a run elsewhere)."""
        if self.only is not None and run_id != self.only:
            raise UnknownRun(f"no run '{run_id}' here: this server shows run {self.only} only")
        if not run_id or run_id.startswith(".") or "/" in run_id or os.sep in run_id or "\\" in run_id:
            raise UnknownRun(f"no run '{run_id}' under {self.root}")
        path = (self.root / run_id).resolve()
        if path.parent != self.root.resolve() or not (path / DB_NAME).is_file():
            raise UnknownRun(f"no run '{run_id}' under {self.root}")
        return path
