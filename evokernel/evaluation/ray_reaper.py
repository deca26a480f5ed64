"""Ends the local Ray instance a driver started, once that driver is gone.

A driver killed with SIGKILL cannot shut Ray down, and Ray's own processes (the GCS, the raylet, the
dashboard's and runtime environment's agents, idle workers) outlive it for a minute or more. Before it
starts the instance, the driver marks its own environment with `MARKER=<id>`, which every process of the
instance inherits (whatever name it gives itself), and starts this small process. While the driver lives, it
keeps a list of the marked processes; when the driver is gone it kills every one of them still running. It
runs no candidate code and reads nothing but /proc.

    python -m evokernel.evaluation.ray_reaper DRIVER_PID ID
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.2
MARKER = "EVOKERNEL_RAY_INSTANCE"


def _started(entry: Path) -> tuple[int, int] | None:
    """(pid, start time) of a /proc entry: the start time tells a process from a later one with its pid."""
    try:
        return int(entry.name), int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def instance_processes(instance: str) -> set[tuple[int, int]]:
    """(pid, start time) of the processes marked as the Ray instance `instance` (see the module's text)."""
    mark = f"{MARKER}={instance}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            marked = mark in (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        key = _started(entry) if marked else None
        if key:
            found.add(key)
    return found


def still_running(known: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return {key for key in known if _started(Path(f"/proc/{key[0]}")) == key}


def main() -> None:
    driver, instance = int(sys.argv[1]), sys.argv[2]
    known: set[tuple[int, int]] = set()
    while os.getppid() == driver:
        known |= instance_processes(instance)
        time.sleep(POLL_S)
    for _ in range(3):  # processes may still be starting when the driver dies
        known |= instance_processes(instance)
        for pid, _ in still_running(known):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(POLL_S)


if __name__ == "__main__":
    main()
