"""Finding runs (a directory, a run id under ./runs, 'latest'), opening them read-only anywhere, and the
lock that lets one driver write a run."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import socket
import sqlite3
import tempfile
from pathlib import Path
from typing import Iterator

from evokernel.errors import BadInput
from evokernel.store.database import Store
from evokernel.store.schema import DB_NAME, damaged

DEFAULT_RUNS = Path("runs")
LOCK_NAME = "driver.lock"


class RunLock:
    """One driver writes a run: an exclusive lock (flock) on RUN/driver.lock, held until `release()` or
    the end of the process. The kernel drops it with the process, so a killed driver leaves no stale lock."""

    def __init__(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.fd: int | None = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 200, 0).decode(errors="replace").strip()
            self.release()
            raise BadInput(f"run {run_dir} is being written by another driver{f' ({holder})' if holder else ''}: "
                           "one driver per run; wait for it to end or stop it") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor of the lock file drops the lock
            self.fd = None



def run_status(run_dir: Path, recorded: str | None) -> str:
    """A run's status: the one its driver recorded, except that a run recorded as running whose driver holds
    no lock (killed) is 'stopped'."""
    if recorded == "running" and not driver_running(run_dir):
        return "stopped"
    return recorded or "unknown"


def driver_running(run_dir: Path) -> bool:
    """Whether a driver holds the run's lock now (a killed driver's run reads 'running' in its meta, but holds
    no lock). Tested with a shared lock taken and dropped at once."""
    try:
        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def iter_runs(root: Path) -> Iterator[Path]:
    """Run directories under `root` (those holding a lineage database), newest first."""
    if (root / DB_NAME).exists():
        yield root
        return
    for path in sorted(root.glob(f"*/{DB_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True):
        yield path.parent


def open_readonly(run_dir: Path) -> Store:
    """Open read-only; where SQLite cannot (a read-only location without the WAL index), read a copy.
    A damaged database is a one-line DamagedDatabase error naming it."""
    try:
        return Store(run_dir, readonly=True)
    except sqlite3.OperationalError:
        pass  # SQLite must create lineage.db-shm next to a WAL database; a read-only place forbids it
    copy = Path(tempfile.mkdtemp(prefix="evokernel-run-"))
    atexit.register(shutil.rmtree, copy, ignore_errors=True)
    for name in (DB_NAME, f"{DB_NAME}-wal"):
        if (run_dir / name).exists():
            shutil.copyfile(run_dir / name, copy / name)
    (copy / "sources").symlink_to((run_dir / "sources").resolve())
    try:
        return Store(copy, readonly=True)
    except BadInput as exc:
        raise type(exc)(str(exc).replace(str(copy / DB_NAME), str(run_dir / DB_NAME))) from None
    except sqlite3.DatabaseError as exc:
        raise damaged(run_dir / DB_NAME, str(exc)) from None


def resolve_run(spec: str | Path, runs_root: Path = DEFAULT_RUNS) -> Path:
    """A run directory from a path, a run id under `runs_root`, or 'latest'."""
    path = Path(spec)
    if (path / DB_NAME).is_file():
        return path
    if str(spec) == "latest":
        latest = next(iter_runs(runs_root), None) if runs_root.is_dir() else None
        if latest is None:
            raise BadInput(f"no runs under {runs_root}/ to take the latest of")
        return latest
    candidate = runs_root / str(spec)
    if (candidate / DB_NAME).is_file():
        return candidate
    raise BadInput(f"no run '{spec}': neither a run directory nor a run id under {runs_root}/")
