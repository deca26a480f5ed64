"""A run survives its driver: Ctrl-C, SIGTERM and `kill -9` in its first seconds (while Ray starts) leave a
run that `--resume` finishes; one driver per run; a damaged lineage database is a one-line error in every
reader and in `--resume`, and nothing is written into it."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.errors import BadInput
from evokernel.lineage import Lineage
from evokernel.store import DB_NAME, SCHEMA_VERSION, Store
from test_lineage_fixture import make_run


def make_config(tmp_path: Path, budget: int) -> Path:
    data = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4,
            "budget": {"evaluations": budget}, "resources": {"max_parallel": 1, "evaluation_timeout_s": 30},
            "random_seed": 5}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_driver(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def children(pid: int) -> list[str]:
    """Names of a process's children."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    names = []
    for kid in kids:
        try:
            names.append(Path(f"/proc/{kid}/comm").read_text().strip())
        except OSError:
            pass
    return names


def wait_for_ray_start(driver: subprocess.Popen) -> None:
    """Until the driver has started Ray's first process (Ray is starting, nothing is evaluated yet)."""
    deadline = time.time() + 60
    while "gcs_server" not in children(driver.pid):
        if driver.poll() is not None or time.time() > deadline:
            pytest.fail(f"the driver did not start Ray: {driver.communicate()[0]}")
        time.sleep(0.01)


def stop(driver: subprocess.Popen) -> None:
    """The driver's process group (its local Ray), which a killed driver can no longer stop."""
    try:
        os.killpg(driver.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    driver.wait(30)


def rows(run_dir: Path) -> list:
    with Store(run_dir, readonly=True) as store:
        return store.individuals()


def meta(run_dir: Path) -> dict:
    with Store(run_dir, readonly=True) as store:
        return store.meta()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_ray_starts_leaves_a_run_that_resume_finishes(tmp_path, sig, local_ray):
    runs = tmp_path / "runs"
    driver = start_driver(str(make_config(tmp_path, 3)), "--runs-dir", str(runs))
    try:
        wait_for_ray_start(driver)
        driver.send_signal(sig)
        output, _ = driver.communicate(timeout=120)
    finally:
        stop(driver)
    (run_dir,) = runs.iterdir()
    assert driver.returncode == 130, output
    assert f"continue it with: evokernel run --resume {run_dir}" in output
    assert "Aborted" not in output and "Traceback" not in output
    assert [(row.operator, row.status) for row in rows(run_dir)] == [("seed", "pending")]  # stored, not evaluated
    assert meta(run_dir)["status"] == "stopped" and "interrupted" in meta(run_dir)["stop_reason"]

    resumed = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    done = rows(run_dir)
    assert len(done) == 3 and all(row.status == "correct" for row in done)
    assert done[0].operator == "seed" and done[0].fitness  # the seed was evaluated on resume
    assert meta(run_dir)["status"] == "finished"


def test_kill_9_while_ray_starts_loses_nothing_and_one_driver_writes_a_run(tmp_path, local_ray):
    runs = tmp_path / "runs"
    driver = start_driver(str(make_config(tmp_path, 4)), "--runs-dir", str(runs))
    try:
        wait_for_ray_start(driver)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        stop(driver)
    (run_dir,) = runs.iterdir()
    assert (run_dir / "config.yaml").is_file()
    assert [(row.operator, row.status) for row in rows(run_dir)] == [("seed", "pending")]

    first = start_driver("--resume", str(run_dir))  # takes the run: a second driver is refused
    try:
        deadline = time.time() + 60
        while len(meta(run_dir).get("sessions", [])) < 2:
            assert first.poll() is None and time.time() < deadline, first.communicate()[0]
            time.sleep(0.05)
        second = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
        assert second.exit_code == 2, second.output
        lines = second.output.strip().splitlines()
        assert len(lines) == 1 and "being written by another driver" in lines[0] and str(run_dir) in lines[0]
        os.kill(first.pid, signal.SIGKILL)  # a killed driver leaves no stale lock
        first.wait(30)
    finally:
        stop(first)
    assert len(meta(run_dir)["sessions"]) == 2  # the refused driver wrote nothing

    resumed = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    done = rows(run_dir)
    assert len(done) == 4 and all(row.status in ("correct", "rejected") for row in done)
    assert sum(row.operator == "seed" for row in done) == 1 and done[0].status == "correct"
    assert len({row.normalized_hash for row in done}) == 4


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "overwritten":
        path.write_bytes(b"not a database, a text file written over it\n" * 200)
    elif how == "junk pages":
        path.write_bytes(data[:4096] + bytes(range(256)) * ((len(data) - 4096) // 256))
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["truncated", "overwritten", "junk pages", "zero-length"])
def test_a_damaged_database_is_one_line_everywhere_and_is_not_written(tmp_path, monkeypatch, how):
    run_dir = tmp_path / "runs" / "demo"
    make_run(run_dir)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"task": "attention-fwd-cpu", "budget": {"evaluations": 3}}))
    db = run_dir / DB_NAME
    damage(db, how)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    monkeypatch.chdir(tmp_path)
    commands = [["lineage", "demo"], ["lineage", "latest", "--tree"], ["show", "demo", "1"], ["diff", "demo", "1", "2"],
                ["export", "demo", "-o", str(tmp_path / "out")], ["report", "demo", "-o", str(tmp_path / "r.html")],
                ["bank", "stats", "demo"], ["bank", "review", "demo"], ["run", "--resume", str(run_dir)],
                ["run", "--replay", str(run_dir), "--runs-dir", str(tmp_path / "new")]]
    for args in commands:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.strip().splitlines() if not line.startswith("no CONFIG given")]
        assert len(lines) == 1 and re.fullmatch(r"error: \S*runs/demo/lineage\.db is not a readable evokernel "
                                                r"database: .+", lines[0]), (args, result.output)
    listed = CliRunner().invoke(main, ["runs"])
    assert listed.exit_code == 0 and "unreadable" in listed.output and "Traceback" not in listed.output
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing written into it
    assert not (tmp_path / "new").exists() and not (tmp_path / "out").exists()
    with pytest.raises(BadInput, match="not a readable evokernel database"):
        Store(run_dir)


def test_schema_version_is_recorded_and_runs_without_one_still_open(tmp_path):
    make_run(tmp_path / "new")
    with Store(tmp_path / "new", readonly=True) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == store.schema_version
    make_run(tmp_path / "old")
    with sqlite3.connect(tmp_path / "old" / DB_NAME) as db:  # as written before versions were recorded
        db.execute("PRAGMA user_version = 0")
    with Lineage(tmp_path / "old") as run:
        assert run.best().id == 6 and run.store.schema_version == 1
    with Store(tmp_path / "old") as store:  # a writer opens it too
        store.set_meta("touched", True)
    with sqlite3.connect(tmp_path / "new" / DB_NAME) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    result = CliRunner().invoke(main, ["lineage", str(tmp_path / "new")])
    assert result.exit_code == 2 and "written by a newer evokernel" in result.output


def test_a_database_file_is_put_in_place_whole_and_only_its_own_writer_makes_its_tables(tmp_path):
    from evokernel.store.schema import create_database

    (tmp_path / "killed").mkdir()  # a driver killed right after it put its database file in place
    create_database(tmp_path / "killed" / DB_NAME)
    with pytest.raises(BadInput, match="holds no lineage tables"):  # as a live run copied without its WAL
        Lineage(tmp_path / "killed")
    with Store(tmp_path / "killed") as store:  # the resume's writer makes the tables
        assert store.count() == 0 and store.schema_version == SCHEMA_VERSION
    (tmp_path / "foreign").mkdir()
    with sqlite3.connect(tmp_path / "foreign" / DB_NAME) as db:  # some other program's SQLite file
        db.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(BadInput, match="lineage tables missing"):
        Store(tmp_path / "foreign")
    with sqlite3.connect(tmp_path / "foreign" / DB_NAME) as db:
        db.execute("DROP TABLE notes")
    before = (tmp_path / "foreign" / DB_NAME).read_bytes()
    with pytest.raises(BadInput, match="holds no lineage tables"):  # no tables, and not made by evokernel
        Store(tmp_path / "foreign")
    assert (tmp_path / "foreign" / DB_NAME).read_bytes() == before


def test_a_run_stopped_before_its_seeds_were_stored_gets_them_on_resume(tmp_path, local_ray):
    """As an interrupted start left runs before seeds were stored first: a config, a session, no kernel."""
    from evokernel.config import load_config

    run_dir = tmp_path / "run"
    config = load_config(make_config(tmp_path, 2)).model_dump(mode="json", by_alias=True)
    with Store(run_dir, create=True) as store:
        store.set_meta("config", config)
        store.set_meta("sessions", [{"started_at": time.time(), "resumed": False}])
        store.set_meta("status", "running")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    resumed = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    done = rows(run_dir)
    assert len(done) == 2 and done[0].operator == "seed" and done[0].status == "correct"
    assert "not even a seed" not in resumed.output


def test_a_killed_drivers_ray_instance_does_not_outlive_it(tmp_path, local_ray):
    """Ray's processes (GCS, raylet, agents, idle workers) outlive a driver killed with SIGKILL by a minute or
    more; the run's own instance is ended within seconds."""
    from evokernel.evaluation.ray_reaper import MARKER, instance_processes, still_running

    runs = tmp_path / "runs"
    driver = start_driver(str(make_config(tmp_path, 40)), "--runs-dir", str(runs))
    try:
        wait_for_ray_start(driver)
        deadline = time.time() + 60
        while "raylet" not in children(driver.pid) and time.time() < deadline:
            time.sleep(0.05)
        kids = Path(f"/proc/{driver.pid}/task/{driver.pid}/children").read_text().split()
        marks = [line for kid in kids for line in Path(f"/proc/{kid}/environ").read_bytes().split(b"\0")
                 if line.startswith(MARKER.encode() + b"=")]  # (the driver's own /proc environ is its first one)
        time.sleep(2)  # agents and workers started
        instance = instance_processes(marks[0].split(b"=", 1)[1].decode())
        assert len(instance) >= 4  # the GCS, the raylet, its agents and workers
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
        deadline = time.time() + 10
        while still_running(instance) and time.time() < deadline:
            time.sleep(0.2)
        assert still_running(instance) == set()
    finally:
        stop(driver)
