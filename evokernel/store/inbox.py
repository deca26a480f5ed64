"""The queue of questions people put to a run (`evokernel ask`): RUN/questions/, one JSON file per request.

`ask` never opens the run's database for writing: the driver holds it, and SQLite's locks and WAL index do
not work across the nodes of a cluster that share the run directory over a network filesystem. A file
written under a hidden name and renamed into place appears whole or not at all on any filesystem, and
the driver lists the folder at its proposal slots, records what it finds in the database and removes the
file, so a request is in exactly one of the two places once the driver has it (a driver killed between
the two finds the file again, and the database keeps the first copy).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from evokernel.store.records import HumanQuestion

INBOX_NAME = "questions"
UNREADABLE_SUFFIX = ".unreadable"  # a file in the queue that is not a request; left for a person to see
QUEUED_FIELDS = ("id", "question_id", "text", "target", "times", "asked_at", "asked_by", "layers")


def new_request_id(asked_at: float) -> str:
    """A request id no other `ask` (on any node) will take: the time it was asked and a random suffix."""
    stamp = datetime.fromtimestamp(asked_at, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def write_partial(path: Path, text: str) -> Path:
    """`text` written and synced under a hidden name beside `path` that no other writer (process or thread, on
    any node) takes; the caller puts it in place in one step (rename, or link where the name must be new)."""
    path.parent.mkdir(exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}.partial")
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return partial


def post(run_dir: Path, question: HumanQuestion) -> Path:
    """Queue a request for the run's driver; returns the file (which appears in one step)."""
    path = Path(run_dir) / INBOX_NAME / f"{question.id}.json"
    queued_fields = {name: value for name, value in asdict(question).items() if name in QUEUED_FIELDS}
    os.replace(write_partial(path, json.dumps(queued_fields)), path)
    return path


def queued(run_dir: Path) -> tuple[list[tuple[Path, HumanQuestion]], list[Path]]:
    """The requests waiting in the queue (oldest first) and the files in it that are not requests."""
    try:
        names = sorted(entry.name for entry in os.scandir(Path(run_dir) / INBOX_NAME)
                       if entry.name.endswith(".json") and not entry.name.startswith("."))
    except FileNotFoundError:
        return [], []
    requests, unreadable = [], []
    for name in names:
        path = Path(run_dir) / INBOX_NAME / name
        try:
            request = _request(json.loads(path.read_text()))
        except FileNotFoundError:  # taken by the driver meanwhile
            continue
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            unreadable.append(path)
            continue
        requests.append((path, request))
    requests.sort(key=lambda item: (item[1].asked_at, item[1].id))
    return requests, unreadable


def _request(data: dict) -> HumanQuestion:
    """A request from a queue file's JSON; ValueError (or KeyError, TypeError) when it is not one."""
    request = HumanQuestion(**{field_name: data[field_name] for field_name in QUEUED_FIELDS})
    types = {"id": str, "question_id": str, "text": str, "target": str, "times": int, "asked_at": (int, float),
             "layers": list}
    if any(not isinstance(getattr(request, name), kind) for name, kind in types.items()) or request.times < 1:
        raise ValueError("not a request written by `evokernel ask`")
    return request


def set_aside(path: Path) -> Path:
    """Rename a file of the queue that is not a request, so it is reported once and kept for a person."""
    aside = path.with_name(path.name + UNREADABLE_SUFFIX)
    os.replace(path, aside)
    return aside
