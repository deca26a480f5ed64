"""The store's schema version: runs written before versions were recorded (version 0) and runs of this
version open in every reader unchanged and in `--resume`; a writer migrates an older database in place,
one step per version; a schema change is one more step (tested here with a synthetic next version)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.errors import BadInput
from evokernel.lineage import Lineage
from evokernel.store import DB_NAME, SCHEMA_VERSION, LLMCall, Store, schema
from test_lineage_fixture import make_run

READERS = [["runs", "."], ["lineage", "run"], ["lineage", "run", "--tree"], ["show", "run", "3"],
           ["diff", "run", "1", "3"], ["report", "run", "-o", "report.html"], ["export", "run", "-o", "tables"],
           ["bank", "stats", "run"], ["bank", "review", "run"], ["ask", "run", "--list"]]


def version(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / DB_NAME) as db:
        return db.execute("PRAGMA user_version").fetchone()[0]


def llm_call_columns(run_dir: Path) -> set[str]:
    with sqlite3.connect(run_dir / DB_NAME) as db:
        return {row[1] for row in db.execute("PRAGMA table_info(llm_calls)")}


def as_before_versions(run_dir: Path) -> None:
    """Make a run look as the releases before the schema version wrote it: user_version 0, llm_calls
    without the columns added later (`reason`, `question_key`), no table of questions people asked."""
    with sqlite3.connect(run_dir / DB_NAME) as db:
        db.execute("DROP TABLE human_questions")
        db.execute("ALTER TABLE llm_calls DROP COLUMN reason")
        db.execute("ALTER TABLE llm_calls DROP COLUMN question_key")
        db.execute("PRAGMA user_version = 0")
    db = sqlite3.connect(run_dir / DB_NAME)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file, as a finished run leaves it
    db.close()


def digest(run_dir: Path) -> str:
    return hashlib.sha256((run_dir / DB_NAME).read_bytes()).hexdigest()


@pytest.mark.parametrize("old", [True, False], ids=["version-0", "this-version"])
def test_every_reader_opens_an_older_or_equal_version_and_writes_nothing(tmp_path, monkeypatch, old):
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "run")
    if old:
        as_before_versions(tmp_path / "run")
    before = digest(tmp_path / "run")
    for args in READERS:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    assert digest(tmp_path / "run") == before and version(tmp_path / "run") == (0 if old else SCHEMA_VERSION)
    with Lineage(tmp_path / "run") as run:
        assert run.store.schema_version == (1 if old else SCHEMA_VERSION) and run.store.llm_failures()


def test_a_writer_migrates_a_run_written_before_versions_were_recorded(tmp_path):
    make_run(tmp_path / "run")
    as_before_versions(tmp_path / "run")
    with Store(tmp_path / "run") as store:  # as `--resume` opens it
        store.add_llm_call(LLMCall(model="m", prompt="p", error="x", reason="timeout", question_key="k"))
    assert version(tmp_path / "run") == SCHEMA_VERSION
    assert {"reason", "question_key"} <= llm_call_columns(tmp_path / "run")
    with Lineage(tmp_path / "run") as run:
        assert run.store.llm_failures()["timeout"] == 1


def test_resume_finishes_a_run_written_before_versions_were_recorded(tmp_path, local_ray):
    from evokernel.config import load_config

    run_dir = tmp_path / "run"
    data = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4,
            "budget": {"evaluations": 2}, "resources": {"max_parallel": 1, "evaluation_timeout_s": 30},
            "random_seed": 5}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    config = load_config(tmp_path / "config.yaml").model_dump(mode="json", by_alias=True)
    with Store(run_dir, create=True) as store:  # stopped before its first evaluation
        store.set_meta("config", config)
        store.set_meta("sessions", [{"started_at": time.time(), "resumed": False}])
        store.set_meta("status", "running")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    as_before_versions(run_dir)
    resumed = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    assert version(run_dir) == SCHEMA_VERSION and "reason" in llm_call_columns(run_dir)
    with Lineage(run_dir) as run:
        assert len(run.evaluated()) == 2


NEXT = SCHEMA_VERSION + 1


@pytest.fixture
def next_version(monkeypatch) -> list[int]:
    """A synthetic schema change: version NEXT adds individuals.note. Returns one entry per run of its step."""
    calls: list[int] = []

    def add_note(db: sqlite3.Connection) -> None:
        calls.append(1)
        db.execute("ALTER TABLE individuals ADD COLUMN note TEXT")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", NEXT)
    monkeypatch.setitem(schema.MIGRATIONS, NEXT, add_note)
    return calls


def individual_columns(run_dir: Path) -> set[str]:
    with sqlite3.connect(run_dir / DB_NAME) as db:
        return {row[1] for row in db.execute("PRAGMA table_info(individuals)")}


def test_a_schema_change_migrates_runs_of_the_version_before_when_a_writer_opens_them(tmp_path, monkeypatch,
                                                                                       request):
    make_run(tmp_path / "now")
    make_run(tmp_path / "v0")
    as_before_versions(tmp_path / "v0")
    calls = request.getfixturevalue("next_version")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["lineage", "now"])  # readers accept the older version and leave it
    assert result.exit_code == 0, result.output
    assert version(tmp_path / "now") == SCHEMA_VERSION and not calls
    with Store(tmp_path / "now") as store:
        assert store.schema_version == NEXT and store.count() == 8
    assert version(tmp_path / "now") == NEXT and "note" in individual_columns(tmp_path / "now") and len(calls) == 1
    with Store(tmp_path / "now"):  # migrated once
        pass
    assert len(calls) == 1
    with Store(tmp_path / "v0"):  # every step, in order
        pass
    assert version(tmp_path / "v0") == NEXT and "reason" in llm_call_columns(tmp_path / "v0")
    assert "note" in individual_columns(tmp_path / "v0")


def test_a_new_database_is_made_at_the_current_version_without_migrating(tmp_path, next_version):
    with Store(tmp_path / "new", create=True) as store:
        assert store.schema_version == NEXT
    assert not next_version and version(tmp_path / "new") == NEXT


def test_a_failed_migration_step_leaves_the_run_at_its_version(tmp_path, monkeypatch):
    make_run(tmp_path / "run")

    def full_disk(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE individuals ADD COLUMN note TEXT")
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", NEXT)
    monkeypatch.setitem(schema.MIGRATIONS, NEXT, full_disk)
    with pytest.raises(BadInput, match=r"cannot write .*lineage.db: database or disk is full"):
        Store(tmp_path / "run")
    assert version(tmp_path / "run") == SCHEMA_VERSION and "note" not in individual_columns(tmp_path / "run")
