"""Reading and writing one run: its lineage database (SQLite, WAL mode) and its content-addressed sources."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evokernel.errors import BadInput
from evokernel.store.records import STATUSES, HumanQuestion, Individual, LLMCall, OpenPrompt, Outcome, ProposalFailure
from evokernel.store.schema import DB_NAME, check_contents, check_file, create_database, make_tables, migrate


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
                create_database(db)
        check_file(db)
        if readonly:
            self.db = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        else:
            self.db = sqlite3.connect(db, timeout=30, isolation_level=None)
        try:
            fresh = check_contents(self.db, db, writer=not readonly)
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                make_tables(self.db) if fresh else migrate(self.db)
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
        """The database's schema version (runs written before versions were recorded read as version 1, the
        version a writer migrates them to)."""
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
        from evokernel.harness.languages import LANGUAGES  # (not the whole harness: readers stay light)

        return self.run_dir / "sources" / f"{digest}{LANGUAGES[language].extension}"

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

    def outcomes(self) -> list[Outcome]:
        """Every kernel's parents, question, status and fitness, in id order."""
        rows = self.db.execute("SELECT id, parent_ids, question_id, status, fitness FROM individuals ORDER BY id")
        return [Outcome(row["id"], json.loads(row["parent_ids"]), row["question_id"], row["status"], row["fitness"])
                for row in rows]

    def table_columns(self, table: str) -> list[str]:
        """The columns of one of the run's tables, as this database has them."""
        return [row[1] for row in self.db.execute(f"PRAGMA table_info({table})")]

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

    def llm_response(self, call_id: int) -> str | None:
        """A call's answer alone (a kernel's history reads one a step, without the prompts)."""
        row = self.db.execute("SELECT response FROM llm_calls WHERE id = ?", (call_id,)).fetchone()
        return row[0] if row else None

    def questions_asked_of(self, parent_ids: list[int]) -> set[str]:
        """Bank questions already put about exactly these kernels (in any order): answered, or waiting as an
        open prompt of the `files` model."""
        wanted, asked = sorted(parent_ids), set()
        tables = [("llm_calls", "")] + ([("prompts", " AND status = 'open'")] if "prompts" in self.tables() else [])
        for table, condition in tables:
            rows = self.db.execute(f"SELECT question_id, parent_ids FROM {table} WHERE question_id IS NOT NULL"
                                   + condition)
            asked |= {question_id for question_id, parents in rows if sorted(json.loads(parents)) == wanted}
        return asked

    def childless_answers(self) -> dict[str, int]:
        """Per question: answers that gave no kernel (the parent kept, a known kernel again, or nothing usable).
        Calls without an answer (an error, a prompt still open) are not among them."""
        rows = self.db.execute(
            "SELECT question_id, COUNT(*) FROM llm_calls c WHERE question_id IS NOT NULL AND response IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM individuals i WHERE i.llm_call_id = c.id) GROUP BY question_id")
        return {question_id: count for question_id, count in rows}

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

    # -- questions people asked (`evokernel ask`) -------------------------------------------------
    def add_human_question(self, question: HumanQuestion) -> bool:
        """Record a question the driver received; False when it was already recorded (received before a
        crash that left its queue file behind)."""
        data = asdict(question)
        for name in HumanQuestion.JSON_FIELDS:
            data[name] = json.dumps(data[name])
        cursor = self.db.execute(f"INSERT OR IGNORE INTO human_questions ({', '.join(data)}) "
                                 f"VALUES ({', '.join('?' * len(data))})", list(data.values()))
        return cursor.rowcount == 1

    def human_questions(self) -> list[HumanQuestion]:
        """Received questions, oldest first (none in a run recorded before schema version 2)."""
        if "human_questions" not in self.tables():
            return []
        return [HumanQuestion.from_row(row) for row in self.db.execute("SELECT * FROM human_questions "
                                                                       "ORDER BY asked_at, id")]

    def add_human_outcome(self, request_id: str, outcome: dict) -> None:
        """What one asking of a human question produced (appended to its outcomes, in one statement)."""
        self.db.execute("UPDATE human_questions SET outcomes = json_insert(outcomes, '$[#]', json(?)) WHERE id = ?",
                        (json.dumps(outcome), request_id))

    # -- proposals that failed, prompts of the `files` model ----------------------------------------
    def add_proposal_failure(self, failure: ProposalFailure) -> int:
        cursor = self.db.execute(
            "INSERT INTO proposal_failures (created_at, operator, kind, reason, parent_ids, llm_call_id) "
            "VALUES (?, ?, ?, ?, ?, ?)", (failure.created_at or time.time(), failure.operator, failure.kind,
                                          failure.reason, json.dumps(failure.parent_ids), failure.llm_call_id))
        failure.id = cursor.lastrowid
        return failure.id

    def proposal_failures(self) -> list[ProposalFailure]:
        """Failed proposals, oldest first (none in a run recorded before schema version 3)."""
        if "proposal_failures" not in self.tables():
            return []
        return [ProposalFailure.from_row(row) for row in self.db.execute("SELECT * FROM proposal_failures ORDER BY id")]

    def add_prompt(self, prompt: OpenPrompt) -> None:
        data = asdict(prompt)
        data["parent_ids"] = json.dumps(data["parent_ids"])
        self.db.execute(f"INSERT INTO prompts ({', '.join(data)}) VALUES ({', '.join('?' * len(data))})",
                        list(data.values()))

    def prompts(self, status: str | None = None) -> list[OpenPrompt]:
        """Prompts of the `files` model, oldest first (none in a run recorded before schema version 3)."""
        if "prompts" not in self.tables():
            return []
        query, args = "SELECT * FROM prompts", ()
        if status:
            query, args = query + " WHERE status = ?", (status,)
        return [OpenPrompt.from_row(row) for row in self.db.execute(query + " ORDER BY created_at, id", args)]

    def prompt_statuses(self) -> dict[str, str]:
        """Each prompt's status by id, without the prompt texts (read every second by a running driver)."""
        if "prompts" not in self.tables():
            return {}
        return {row[0]: row[1] for row in self.db.execute("SELECT id, status FROM prompts")}

    def open_prompt_count(self) -> int:
        if "prompts" not in self.tables():
            return 0
        return self.db.execute("SELECT COUNT(*) FROM prompts WHERE status = 'open'").fetchone()[0]

    def open_prompt_for(self, question_key: str) -> str | None:
        """The id of an open prompt asking the question `question_key`, if one waits (without prompt texts)."""
        if "prompts" not in self.tables():
            return None
        row = self.db.execute("SELECT id FROM prompts WHERE status = 'open' AND question_key = ? LIMIT 1",
                              (question_key,)).fetchone()
        return row[0] if row else None

    def prompt(self, prompt_id: str) -> OpenPrompt | None:
        if "prompts" not in self.tables():
            return None
        row = self.db.execute("SELECT * FROM prompts WHERE id = ?", (prompt_id,)).fetchone()
        return OpenPrompt.from_row(row) if row else None

    def close_prompt(self, prompt_id: str, status: str, answered_by: str | None = None, llm_call_id: int | None = None,
                     child_id: int | None = None, reason: str | None = None) -> bool:
        """Mark an open prompt answered or failed; False when it was not open (taken already)."""
        cursor = self.db.execute(
            "UPDATE prompts SET status = ?, answered_at = ?, answered_by = ?, llm_call_id = ?, child_id = ?, "
            "reason = ? WHERE id = ? AND status = 'open'",
            (status, time.time(), answered_by, llm_call_id, child_id, reason, prompt_id))
        return cursor.rowcount == 1

    def tables(self) -> set[str]:
        return {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}



class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *exc: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")

