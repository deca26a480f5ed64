"""The lineage store of one run: an embedded SQLite database plus content-addressed sources.

Layout of a run directory:
    runs/<id>/lineage.db        individuals, scenario results, LLM calls, trigger events, questions
    runs/<id>/sources/<sha>.cu  every kernel source, named by the hash of its text
    runs/<id>/config.yaml       the config the run was started with
Rows are written as results arrive (WAL mode), so a reader can inspect a live run.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from evokernel.errors import BadInput

DB_NAME = "lineage.db"
LOCK_NAME = "driver.lock"
SCHEMA_VERSION = 1  # PRAGMA user_version; runs written before it was set read 0 and are version 1
SQLITE_HEADER = b"SQLite format 3\x00"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS individuals (
    id INTEGER PRIMARY KEY,
    parent_ids TEXT NOT NULL DEFAULT '[]',
    generation INTEGER NOT NULL DEFAULT 0,
    operator TEXT NOT NULL,
    question_id TEXT,
    trigger TEXT,
    model TEXT,
    llm_call_id INTEGER,
    source_hash TEXT NOT NULL,
    normalized_hash TEXT NOT NULL,
    language TEXT NOT NULL,
    knobs TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'pending',
    fitness REAL,
    failure TEXT,
    build_log TEXT,
    report TEXT,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    eval_seconds REAL,
    worker TEXT,
    device TEXT
);
CREATE INDEX IF NOT EXISTS individuals_norm ON individuals(normalized_hash);
CREATE TABLE IF NOT EXISTS scenario_results (
    individual_id INTEGER NOT NULL REFERENCES individuals(id),
    name TEXT NOT NULL,
    correct INTEGER NOT NULL,
    rel_err REAL, max_err REAL, time_ms REAL, original_time_ms REAL, speedup REAL, spread REAL,
    suspicious INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    PRIMARY KEY (individual_id, name)
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    model TEXT NOT NULL,
    operator TEXT,
    question_id TEXT,
    parent_ids TEXT NOT NULL DEFAULT '[]',
    prompt TEXT NOT NULL,
    response TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER,
    cost_usd REAL NOT NULL DEFAULT 0,
    latency_s REAL,
    cached INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    reason TEXT,
    question_key TEXT
);
CREATE TABLE IF NOT EXISTS trigger_events (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    evaluation INTEGER NOT NULL,
    kind TEXT NOT NULL,
    individual_id INTEGER,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS proposed_questions (
    id TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    triggers TEXT NOT NULL DEFAULT '[]',
    layers TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'proposed',
    from_individual INTEGER,
    created_at REAL NOT NULL
);
"""

TABLES = ("meta", "individuals", "scenario_results", "llm_calls", "trigger_events", "proposed_questions")
STATUSES = ("pending", "running", "correct", "rejected")


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def normalized_hash(source: str) -> str:
    """Hash of the source without comments and whitespace: identical kernels share it.

    Knob comments (`// @knob ...`) are dropped like any comment; the knob values stay in the code.
    """
    text = re.sub(r"/\*.*?\*/", " ", source, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", " ", text)
    return hashlib.sha256(re.sub(r"\s+", "", text).encode()).hexdigest()[:16]


@dataclass
class Individual:
    """One row of `individuals`: a kernel, where it came from and what the harness said of it."""

    operator: str
    source_hash: str
    normalized_hash: str
    language: str
    parent_ids: list[int] = field(default_factory=list)
    generation: int = 0
    question_id: str | None = None
    trigger: str | None = None
    model: str | None = None
    llm_call_id: int | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"
    fitness: float | None = None
    failure: str | None = None
    build_log: str | None = None
    report: dict | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    eval_seconds: float | None = None
    worker: str | None = None
    device: str | None = None
    id: int | None = None

    JSON_FIELDS = ("parent_ids", "knobs", "report")

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Individual":
        data = dict(row)
        for name in cls.JSON_FIELDS:
            data[name] = json.loads(data[name]) if data[name] is not None else None
        return cls(**data)


@dataclass
class LLMCall:
    """One row of `llm_calls`: a prompt, its answer, what it cost."""

    model: str
    prompt: str
    response: str | None = None
    operator: str | None = None
    question_id: str | None = None
    parent_ids: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float = 0.0
    latency_s: float | None = None
    cached: bool = False
    error: str | None = None
    reason: str | None = None  # why the call failed, in a few words (see mutations/llm.py failure_reason)
    question_key: str | None = None  # what defines the question (model, operator, question, parents): replay key
    created_at: float = field(default_factory=time.time)
    id: int | None = None


class DamagedDatabase(BadInput):
    """A run's database that cannot be read (truncated, overwritten, empty, not evokernel's)."""


def _damaged(db: Path, why: str) -> DamagedDatabase:
    return DamagedDatabase(f"{db} is not a readable evokernel database: {why}")


def _check_file(db: Path) -> None:
    """Refuse, before SQLite opens it, a file that cannot be a database (SQLite would initialise an empty one)."""
    try:
        with open(db, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise BadInput(f"cannot read {db}: {exc.strerror or exc}") from None
    if not header:
        raise _damaged(db, "the file is empty (0 bytes)")
    if header != SQLITE_HEADER:
        raise _damaged(db, "not an SQLite file (overwritten?)")


def _check_contents(connection: sqlite3.Connection, db: Path, writer: bool) -> bool:
    """Integrity, lineage tables and schema version of an open database; raises DamagedDatabase (or
    sqlite3.OperationalError where SQLite cannot open the file here, for the caller to handle). Returns
    whether the tables are still to be made: a file `_create` made, whose writer was killed before it made
    them (only a writer is told so; a reader is told the file holds no lineage tables)."""
    try:
        problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = connection.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if "malformed" in str(exc) or "not a database" in str(exc):
            raise _damaged(db, str(exc)) from None
        raise
    except sqlite3.DatabaseError as exc:
        raise _damaged(db, str(exc)) from None
    if problems != ["ok"]:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise _damaged(db, f"integrity check failed: {problems[0]}{more}")
    if version > SCHEMA_VERSION:
        raise BadInput(f"{db} was written by a newer evokernel (schema version {version}; this one reads up to "
                       f"{SCHEMA_VERSION}): upgrade evokernel to read it")
    if not tables:
        if writer and version == SCHEMA_VERSION:
            return True
        raise _damaged(db, f"it holds no lineage tables (a live run copied without its {DB_NAME}-wal file?)")
    missing = [name for name in TABLES if name not in tables]
    if missing:
        raise _damaged(db, f"lineage tables missing: {', '.join(missing)}")
    return False


def _create(db: Path) -> None:
    """Put a new database file in place in one step (built under another name, then renamed), so that no
    reader ever sees a half-written file: the schema version and WAL mode in its header, no tables yet.
    The writer then makes the tables in the WAL, as it writes everything: a live run copied without its
    -wal file holds no lineage tables, and says so, rather than looking like an empty run."""
    partial = db.with_name(f".{db.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    connection = sqlite3.connect(partial, isolation_level=None)
    try:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()
    os.replace(partial, db)


class Store:
    """Read and write one run directory. `readonly=True` never writes (safe on a live or copied run).

    An existing database is checked before anything is read or written (integrity, tables, schema
    version): a damaged one is a one-line DamagedDatabase error and is left as it is.
    """

    def __init__(self, run_dir: Path, readonly: bool = False, create: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.readonly = readonly
        db = self.run_dir / DB_NAME
        if not create and not db.exists():
            raise BadInput(f"no run at {self.run_dir} ({DB_NAME} not found)")
        if create:
            (self.run_dir / "sources").mkdir(parents=True, exist_ok=True)
            if not db.exists() and not readonly:
                _create(db)
        _check_file(db)
        if readonly:
            self.db = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        else:
            self.db = sqlite3.connect(db, timeout=30, isolation_level=None)
        try:
            fresh = _check_contents(self.db, db, writer=not readonly)
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                if fresh:
                    self.db.executescript(SCHEMA)
                columns = {row[1] for row in self.db.execute("PRAGMA table_info(llm_calls)")}
                for name in ("reason", "question_key"):  # runs recorded before these columns existed
                    if name not in columns:
                        self.db.execute(f"ALTER TABLE llm_calls ADD COLUMN {name} TEXT")
        except sqlite3.OperationalError as exc:
            self.db.close()
            if readonly:
                raise  # open_readonly reads a copy where SQLite cannot open the file in place
            raise BadInput(f"cannot write {db}: {exc}") from None
        except BaseException:
            self.db.close()
            raise
        self.db.row_factory = sqlite3.Row

    @property
    def schema_version(self) -> int:
        """The database's schema version (runs written before versions were recorded are version 1)."""
        return self.db.execute("PRAGMA user_version").fetchone()[0] or 1

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta -----------------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self) -> dict[str, Any]:
        return {row["key"]: json.loads(row["value"]) for row in self.db.execute("SELECT * FROM meta")}

    # -- individuals ----------------------------------------------------------------------------
    def source_path(self, digest: str, language: str) -> Path:
        return self.run_dir / "sources" / f"{digest}{'.cu' if language == 'cuda' else '.c'}"

    def add_individual(self, individual: Individual, source: str) -> int:
        path = self.source_path(individual.source_hash, individual.language)
        if not path.exists():
            path.write_text(source)
        data = asdict(individual)
        data.pop("id")
        for name in Individual.JSON_FIELDS:
            data[name] = json.dumps(data[name]) if data[name] is not None else None
        columns = ", ".join(data)
        cursor = self.db.execute(f"INSERT INTO individuals ({columns}) VALUES ({', '.join('?' * len(data))})",
                                 list(data.values()))
        individual.id = cursor.lastrowid
        return individual.id

    def update_individual(self, individual_id: int, **values: Any) -> None:
        for name in Individual.JSON_FIELDS:
            if name in values and values[name] is not None:
                values[name] = json.dumps(values[name])
        assignments = ", ".join(f"{name} = ?" for name in values)
        self.db.execute(f"UPDATE individuals SET {assignments} WHERE id = ?", [*values.values(), individual_id])

    def record_result(self, individual_id: int, report: dict, worker: str | None = None,
                      started_at: float | None = None) -> None:
        """Store a CheckReport (as a dict) for an individual, in one transaction."""
        finished = time.time()
        status = "correct" if report["correct"] else "rejected"
        with self.transaction():
            self.update_individual(
                individual_id, status=status, fitness=report.get("geomean_speedup") if report["correct"] else None,
                failure=report.get("failure"), build_log=report.get("build_log"), report=report,
                started_at=started_at, finished_at=finished,
                eval_seconds=(finished - started_at) if started_at else report.get("check_seconds"),
                worker=worker, device=report.get("device"))
            self.db.execute("DELETE FROM scenario_results WHERE individual_id = ?", (individual_id,))
            for s in report.get("scenarios", []):
                self.db.execute(
                    "INSERT INTO scenario_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (individual_id, s["name"], int(bool(s.get("correct"))), s.get("rel_err"), s.get("max_err"),
                     s.get("time_ms"), s.get("original_time_ms"), s.get("speedup"), s.get("spread"),
                     int(bool(s.get("suspicious"))), s.get("error")))

    def transaction(self) -> "_Transaction":
        return _Transaction(self.db)

    def individuals(self, status: str | None = None) -> list[Individual]:
        query, args = "SELECT * FROM individuals", ()
        if status:
            query, args = query + " WHERE status = ?", (status,)
        return [Individual.from_row(row) for row in self.db.execute(query + " ORDER BY id", args)]

    def individual(self, individual_id: int) -> Individual:
        row = self.db.execute("SELECT * FROM individuals WHERE id = ?", (individual_id,)).fetchone()
        if row is None:
            raise BadInput(f"run {self.run_dir} has no individual {individual_id}")
        return Individual.from_row(row)

    def source(self, individual: Individual) -> str:
        return self.source_path(individual.source_hash, individual.language).read_text()

    def find_duplicate(self, normalized: str) -> Individual | None:
        row = self.db.execute("SELECT * FROM individuals WHERE normalized_hash = ? ORDER BY id LIMIT 1",
                              (normalized,)).fetchone()
        return Individual.from_row(row) if row else None

    def scenario_results(self, individual_id: int) -> list[dict]:
        rows = self.db.execute("SELECT * FROM scenario_results WHERE individual_id = ? ORDER BY rowid",
                               (individual_id,))
        return [dict(row) for row in rows]

    def best(self, k: int = 1) -> list[Individual]:
        rows = self.db.execute("SELECT * FROM individuals WHERE status = 'correct' AND fitness IS NOT NULL "
                               "ORDER BY fitness DESC, id LIMIT ?", (k,))
        return [Individual.from_row(row) for row in rows]

    def count(self, *statuses: str) -> int:
        statuses = statuses or STATUSES
        marks = ", ".join("?" * len(statuses))
        return self.db.execute(f"SELECT COUNT(*) FROM individuals WHERE status IN ({marks})", statuses).fetchone()[0]

    # -- LLM calls, triggers, proposed questions --------------------------------------------------
    def add_llm_call(self, call: LLMCall) -> int:
        data = asdict(call)
        data.pop("id")
        data["parent_ids"] = json.dumps(data["parent_ids"])
        data["cached"] = int(data["cached"])
        cursor = self.db.execute(f"INSERT INTO llm_calls ({', '.join(data)}) VALUES ({', '.join('?' * len(data))})",
                                 list(data.values()))
        call.id = cursor.lastrowid
        return call.id

    def llm_calls(self) -> list[dict]:
        return [dict(row) for row in self.db.execute("SELECT * FROM llm_calls ORDER BY id")]

    def llm_call(self, call_id: int) -> dict | None:
        row = self.db.execute("SELECT * FROM llm_calls WHERE id = ?", (call_id,)).fetchone()
        return dict(row) if row else None

    def llm_failures(self) -> dict[str, int]:
        """Failed LLM calls by reason, most frequent first (calls recorded without a reason count as 'error')."""
        counts: dict[str, int] = {}
        for call in self.llm_calls():
            if call["error"] is not None:
                reason = call.get("reason") or "error"
                counts[reason] = counts.get(reason, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def total_cost(self) -> float:
        return float(self.db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM llm_calls").fetchone()[0])

    def add_trigger_event(self, evaluation: int, kind: str, individual_id: int | None = None,
                          detail: str | None = None) -> None:
        self.db.execute("INSERT INTO trigger_events (created_at, evaluation, kind, individual_id, detail) "
                        "VALUES (?, ?, ?, ?, ?)", (time.time(), evaluation, kind, individual_id, detail))

    def trigger_events(self) -> list[dict]:
        return [dict(row) for row in self.db.execute("SELECT * FROM trigger_events ORDER BY id")]

    def add_proposed_question(self, question_id: str, text: str, triggers: list[str], layers: list[str],
                              from_individual: int | None) -> None:
        self.db.execute("INSERT OR IGNORE INTO proposed_questions VALUES (?, ?, ?, ?, 'proposed', ?, ?)",
                        (question_id, text, json.dumps(triggers), json.dumps(layers), from_individual, time.time()))

    def proposed_questions(self, status: str | None = None) -> list[dict]:
        query, args = "SELECT * FROM proposed_questions", ()
        if status:
            query, args = query + " WHERE status = ?", (status,)
        rows = [dict(row) for row in self.db.execute(query + " ORDER BY created_at", args)]
        for row in rows:
            row["triggers"], row["layers"] = json.loads(row["triggers"]), json.loads(row["layers"])
        return rows

    def set_question_status(self, question_id: str, status: str) -> None:
        self.db.execute("UPDATE proposed_questions SET status = ? WHERE id = ?", (status, question_id))


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


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *exc: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


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
        raise _damaged(run_dir / DB_NAME, str(exc)) from None
