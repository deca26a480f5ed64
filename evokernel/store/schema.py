"""A run's database file: its tables, its schema version and the steps that migrate older versions, the
checks made before anything is read or written, and how a new file is put in place.

The version is SQLite's `PRAGMA user_version`. A writer brings an older database up to SCHEMA_VERSION
when it opens it (`migrate`, one step per version, in order); a reader accepts any version up to
SCHEMA_VERSION and never writes, so what it reads must tolerate the columns a later step adds.
A database of a newer version is refused.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from evokernel.errors import BadInput

DB_NAME = "lineage.db"
SCHEMA_VERSION = 3  # PRAGMA user_version; runs written before it was set read 0 and migrate to 1
SQLITE_HEADER = b"SQLite format 3\x00"

# Questions people put to a running search (`evokernel ask`), as the driver received them (version 2).
HUMAN_QUESTIONS_TABLE = """
CREATE TABLE IF NOT EXISTS human_questions (
    id TEXT PRIMARY KEY,
    question_id TEXT NOT NULL,
    text TEXT NOT NULL,
    target TEXT NOT NULL,
    times INTEGER NOT NULL,
    layers TEXT NOT NULL DEFAULT '[]',
    asked_at REAL NOT NULL,
    asked_by TEXT,
    received_at REAL,
    outcomes TEXT NOT NULL DEFAULT '[]'
);
"""

# Proposals that produced no kernel (version 3): which operator, why (in full, and its kind for counting).
PROPOSAL_FAILURES_TABLE = """
CREATE TABLE IF NOT EXISTS proposal_failures (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    operator TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    parent_ids TEXT NOT NULL DEFAULT '[]',
    llm_call_id INTEGER
);
"""

# Prompts of the `files` model waiting for, or given, an answer (version 3); the text is also RUN/prompts/ID.md.
PROMPTS_TABLE = """
CREATE TABLE IF NOT EXISTS prompts (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    operator TEXT NOT NULL,
    question_id TEXT,
    trigger TEXT,
    parent_ids TEXT NOT NULL DEFAULT '[]',
    question_key TEXT,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    answered_at REAL,
    answered_by TEXT,
    llm_call_id INTEGER,
    child_id INTEGER,
    reason TEXT
);
"""

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
""" + HUMAN_QUESTIONS_TABLE + PROPOSAL_FAILURES_TABLE + PROMPTS_TABLE

# Tables every version has; later versions add more (a reader of an older run finds them missing).
TABLES = ("meta", "individuals", "scenario_results", "llm_calls", "trigger_events", "proposed_questions")


def _add_llm_call_reasons(db: sqlite3.Connection) -> None:
    """Version 1: llm_calls has `reason` and `question_key` (runs recorded before versions were may lack them)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(llm_calls)")}
    for name in ("reason", "question_key"):
        if name not in columns:
            db.execute(f"ALTER TABLE llm_calls ADD COLUMN {name} TEXT")


def _add_human_questions(db: sqlite3.Connection) -> None:
    """Version 2: the table of questions people asked the running search (`evokernel ask`)."""
    db.execute(HUMAN_QUESTIONS_TABLE)


def _add_failures_and_prompts(db: sqlite3.Connection) -> None:
    """Version 3: proposals that failed, and the prompts of the `files` model."""
    db.execute(PROPOSAL_FAILURES_TABLE)
    db.execute(PROMPTS_TABLE)


# version -> the step that brings a database of the version before it there. A schema change adds the
# next step here, raises SCHEMA_VERSION and changes SCHEMA (which makes new databases at the new version).
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_llm_call_reasons, 2: _add_human_questions,
                                                                3: _add_failures_and_prompts}


def migrate(db: sqlite3.Connection) -> None:
    """Bring a database a writer opened (autocommit connection) up to SCHEMA_VERSION, each step in one
    transaction together with its new version, so an interrupted migration resumes where it stopped."""
    found = db.execute("PRAGMA user_version").fetchone()[0]
    for version in range(found + 1, SCHEMA_VERSION + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            MIGRATIONS[version](db)
            db.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def make_tables(db: sqlite3.Connection) -> None:
    """The tables of a new database, at the current version (no migration needed)."""
    db.executescript(SCHEMA)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class DamagedDatabase(BadInput):
    """A run's database that cannot be read (truncated, overwritten, empty, not evokernel's)."""


def damaged(db: Path, why: str) -> DamagedDatabase:
    return DamagedDatabase(f"{db} is not a readable evokernel database: {why}")


def check_file(db: Path) -> None:
    """Refuse, before SQLite opens it, a file that cannot be a database (SQLite would initialise an empty one)."""
    try:
        with open(db, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise BadInput(f"cannot read {db}: {exc.strerror or exc}") from None
    if not header:
        raise damaged(db, "the file is empty (0 bytes)")
    if header != SQLITE_HEADER:
        raise damaged(db, "not an SQLite file (overwritten?)")


def check_contents(connection: sqlite3.Connection, db: Path, writer: bool) -> bool:
    """Integrity, lineage tables and schema version of an open database; raises DamagedDatabase (or
    sqlite3.OperationalError where SQLite cannot open the file here, for the caller to handle). Returns
    whether the tables are still to be made: a file `create_database` made, whose writer was killed before
    it made them (only a writer is told so; a reader is told the file holds no lineage tables)."""
    try:
        problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = connection.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if "malformed" in str(exc) or "not a database" in str(exc):
            raise damaged(db, str(exc)) from None
        raise
    except sqlite3.DatabaseError as exc:
        raise damaged(db, str(exc)) from None
    if problems != ["ok"]:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise damaged(db, f"integrity check failed: {problems[0]}{more}")
    if version > SCHEMA_VERSION:
        raise BadInput(f"{db} was written by a newer evokernel (schema version {version}; this one reads up to "
                       f"{SCHEMA_VERSION}): upgrade evokernel to read it")
    if not tables:
        if writer and version > 0:  # a versioned file without tables: create_database's, its writer killed
            return True
        raise damaged(db, f"it holds no lineage tables (a live run copied without its {DB_NAME}-wal file?)")
    missing = [name for name in TABLES if name not in tables]
    if missing:
        raise damaged(db, f"lineage tables missing: {', '.join(missing)}")
    return False


def create_database(db: Path) -> None:
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

