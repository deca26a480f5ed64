"""Read-only queries over one run's lineage store: where a kernel came from and what paid off.

Everything here only reads, so it works on a run that is still being written and on a run copied
to another machine (even to a read-only location, or without its `-wal`/`-shm` files).
Interface: `resolve_run`, `find_runs`, `RunSummary`, `Lineage` (ancestry, descendants, diffs,
per-scenario comparisons, question effectiveness, failures by reason, best over evaluations,
LLM cost, export tables), `Step`, `ScenarioDelta`, `TreeNode`.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from evokernel.errors import BadInput
from evokernel.store import DB_NAME, Individual, iter_runs, open_readonly

DEFAULT_RUNS = Path("runs")
MIN_NOISE = 0.01  # per-scenario changes below 1% are never called a win or a loss


# -- opening runs ---------------------------------------------------------------------------------

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


# -- value types ----------------------------------------------------------------------------------

@dataclass
class RunSummary:
    """One line of `evokernel runs`."""

    id: str
    path: Path
    status: str
    task: str | None
    stop_reason: str | None
    evaluations: int
    correct: int
    best: float | None
    best_id: int | None
    cost_usd: float
    started_at: float | None


@dataclass
class ScenarioDelta:
    """One scenario of a child against its parent (or of kernel B against kernel A)."""

    name: str
    before: float | None  # speedup over the task's original kernel
    after: float | None
    noise: float  # relative change below which neither side wins
    verdict: str  # win, loss, tie, broke, fixed, -

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before and self.after else None


@dataclass
class Step:
    """One step of an ancestry: the kernel, the parent it was made from, and what changed."""

    individual: Individual
    parent: Individual | None
    other_parents: list[int]
    question_text: str | None
    deltas: list[ScenarioDelta] = field(default_factory=list)

    @property
    def wins(self) -> list[str]:
        return [d.name for d in self.deltas if d.verdict in ("win", "fixed")]

    @property
    def losses(self) -> list[str]:
        return [d.name for d in self.deltas if d.verdict in ("loss", "broke")]

    @property
    def ties(self) -> list[str]:
        """Scenarios whose change is within the timing noise."""
        return [d.name for d in self.deltas if d.verdict == "tie"]


@dataclass
class TreeNode:
    """A kernel in a descendant tree; `repeat` marks a child already shown under another parent."""

    individual: Individual
    children: list["TreeNode"] = field(default_factory=list)
    repeat: bool = False


def compare_scenarios(before: list[dict], after: list[dict]) -> list[ScenarioDelta]:
    """Per-scenario verdicts; a change within the larger timing spread (at least 1%) is a tie."""
    old = {row["name"]: row for row in before}
    deltas = []
    for row in after:
        prev = old.get(row["name"])
        a, b = (prev or {}).get("speedup"), row.get("speedup")
        noise = max(MIN_NOISE, (prev or {}).get("spread") or 0.0, row.get("spread") or 0.0)
        if prev is None:
            verdict = "-"
        elif prev["correct"] and not row["correct"]:
            verdict = "broke"
        elif row["correct"] and not prev["correct"]:
            verdict = "fixed"
        elif a and b:
            verdict = "win" if b / a > 1 + noise else "loss" if b / a < 1 / (1 + noise) else "tie"
        else:
            verdict = "-"
        deltas.append(ScenarioDelta(row["name"], a, b, noise, verdict))
    return deltas


def retime_record(report: dict, best: Individual, seed: Individual, rounds: int) -> dict:
    """What the end-of-run re-timing of the best kernel against the seed says (the run's meta keeps it).

    The gain stands when the interval the per-scenario spreads give the re-timed speedup lies above 1 and
    the re-timed geomean exceeds 1 + the median spread (at least MIN_NOISE); otherwise it is within noise.
    """
    rows = [s for s in report.get("scenarios", []) if s.get("speedup")]
    record = {"id": best.id, "seed_id": seed.id, "rounds": rounds, "at": time.time(),
              "search_ratio": best.fitness / seed.fitness if best.fitness and seed.fitness else None,
              "geomean": None, "low": None, "high": None, "median_spread": None, "verdict": "not confirmed",
              "failure": None, "scenarios": [{"name": s["name"], "speedup": s["speedup"], "spread": s.get("spread")}
                                             for s in rows]}
    if not report.get("correct") or not report.get("geomean_speedup") or not rows:
        record["failure"] = report.get("failure") or "no timing"
        return record
    spreads = [s.get("spread") or 0.0 for s in rows]
    speedups = [s["speedup"] for s in rows]
    geo = lambda values: math.exp(sum(math.log(v) for v in values) / len(values))  # noqa: E731
    low = geo([v / (1 + e) for v, e in zip(speedups, spreads)])
    high = geo([v * (1 + e) for v, e in zip(speedups, spreads)])
    median = statistics.median(spreads)
    geomean = report["geomean_speedup"]
    stands = low > 1.0 and geomean > 1.0 + max(MIN_NOISE, median)
    record.update(geomean=geomean, low=low, high=high, median_spread=median,
                  verdict="gain" if stands else "within noise")
    return record


def describe_retime(record: dict) -> str:
    """The re-timing in one line, e.g. "re-timed against seed #1 (21 rounds): 1.012x (interval 0.871-1.176
    from the per-scenario spreads, median 14.0%): within noise"."""
    head = f"re-timed against seed #{record['seed_id']} ({record['rounds']} rounds)"
    if record.get("failure"):
        return f"{head}: {record['failure']}: the gain is not confirmed"
    verdict = ("a gain beyond the noise" if record["verdict"] == "gain"
               else "within noise: the gain over the seed does not stand")
    return (f"{head}: {record['geomean']:.3f}x (interval {record['low']:.3f}-{record['high']:.3f} from the "
            f"per-scenario spreads, median {100 * record['median_spread']:.1f}%): {verdict}")


def failure_reason(failure: str, scenario_names: set[str]) -> str:
    """Group rejections: drop the scenario name, quoted names and numbers from the first line."""
    text = (failure.strip().splitlines() or ["(no reason recorded)"])[0]
    prefix, sep, rest = text.partition(": ")
    if sep and prefix in scenario_names:
        text = rest
    if "does not compile" in text:
        return text.split(":", 1)[0]
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", text)
    return text[:100]


def _question_bank_text(question_id: str) -> str | None:
    """The bank's text for a question id, when the bank offers a lookup."""
    try:
        from evokernel import bank
    except ImportError:
        return None
    lookup = getattr(bank, "question_text", None)
    try:
        return lookup(question_id) if lookup else None
    except (BadInput, KeyError, LookupError):
        return None


# -- the queries ----------------------------------------------------------------------------------

class Lineage:
    """Read-only view of one run. Use as a context manager (`with Lineage.open(spec) as run:`)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.store = open_readonly(self.run_dir)
        self.individuals: dict[int, Individual] = {i.id: i for i in self.store.individuals()}

    @classmethod
    def open(cls, spec: str | Path, runs_root: Path = DEFAULT_RUNS) -> "Lineage":
        return cls(resolve_run(spec, runs_root))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Lineage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- single kernels -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.run_dir.resolve().name

    @property
    def speed_reference(self) -> str:
        """What this run's fitness is a speedup over (the config's speed_reference)."""
        from evokernel.harness import speed_reference_label

        return speed_reference_label((self.store.meta().get("config") or {}).get("speed_reference", "original"))

    def get(self, individual_id: int) -> Individual:
        if individual_id not in self.individuals:
            raise BadInput(f"run {self.name} has no kernel {individual_id} "
                           f"(ids 1-{max(self.individuals, default=0)})")
        return self.individuals[individual_id]

    def source(self, individual_id: int) -> str:
        ind = self.get(individual_id)
        path = self.store.source_path(ind.source_hash, ind.language)
        return path.read_text() if path.is_file() else f"// source file {path.name} is missing from the run\n"

    def source_name(self, individual_id: int) -> str:
        ind = self.get(individual_id)
        return f"sources/{self.store.source_path(ind.source_hash, ind.language).name}"

    def failure(self, individual_id: int) -> str | None:
        """Why the kernel was rejected; compiler messages name its source file in the run."""
        from evokernel.harness.build import show_source_paths

        return show_source_paths(self.get(individual_id).failure, self.source_name(individual_id))

    def build_log(self, individual_id: int) -> str:
        """The compiler's output for the kernel, naming its source file in the run."""
        from evokernel.harness.build import show_source_paths

        return show_source_paths(self.get(individual_id).build_log or "", self.source_name(individual_id))

    @cached_property
    def _scenarios(self) -> dict[int, list[dict]]:
        return {i: self.store.scenario_results(i) for i in self.individuals}

    def scenarios(self, individual_id: int) -> list[dict]:
        self.get(individual_id)
        return self._scenarios[individual_id]

    def scenario_names(self) -> list[str]:
        """Scenario names in the order the harness ran them."""
        names: dict[str, None] = {}
        for rows in self._scenarios.values():
            names.update((row["name"], None) for row in rows)
        return list(names)

    def parents(self, individual_id: int) -> list[Individual]:
        return [self.individuals[p] for p in self.get(individual_id).parent_ids if p in self.individuals]

    @cached_property
    def _children(self) -> dict[int, list[int]]:
        children: dict[int, list[int]] = {i: [] for i in self.individuals}
        for ind in self.individuals.values():
            for parent in ind.parent_ids:
                children.setdefault(parent, []).append(ind.id)
        return children

    def children(self, individual_id: int) -> list[Individual]:
        return [self.individuals[c] for c in self._children.get(self.get(individual_id).id, [])]

    def question_text(self, question_id: str | None) -> str | None:
        if not question_id:
            return None
        if question_id not in self._question_texts:
            self._question_texts[question_id] = _question_bank_text(question_id)
        return self._question_texts[question_id]

    @cached_property
    def _question_texts(self) -> dict[str, str | None]:
        return {q["id"]: q["text"] for q in self.store.proposed_questions()}

    def llm_call(self, individual_id: int) -> dict | None:
        call_id = self.get(individual_id).llm_call_id
        return self.store.llm_call(call_id) if call_id is not None else None

    def diff(self, a: int, b: int, context: int = 3) -> str:
        """Unified diff of the source of kernel `a` into kernel `b`."""
        lines = difflib.unified_diff(self.source(a).splitlines(keepends=True), self.source(b).splitlines(keepends=True),
                                     f"#{a} {self.source_name(a)}", f"#{b} {self.source_name(b)}", n=context)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def compare(self, a: int, b: int) -> list[ScenarioDelta]:
        """How kernel `b` does against kernel `a`, scenario by scenario."""
        return compare_scenarios(self.scenarios(a), self.scenarios(b))

    # -- lineage ---------------------------------------------------------------------------------
    def top(self, k: int = 1) -> list[Individual]:
        ranked = [i for i in self.individuals.values() if i.status == "correct" and i.fitness is not None]
        return sorted(ranked, key=lambda i: (-i.fitness, i.id))[:k]

    def best(self) -> Individual:
        top = self.top(1)
        if not top:
            raise BadInput(f"run {self.name} has no correct kernel yet")
        return top[0]

    def ancestry(self, individual_id: int) -> list[Step]:
        """From the seed to the kernel, following each kernel's first (primary) parent."""
        chain, current = [], self.get(individual_id)
        while True:
            parents = self.parents(current.id)
            parent = parents[0] if parents else None
            deltas = self.compare(parent.id, current.id) if parent else []
            chain.append(Step(current, parent, current.parent_ids[1:], self.question_text(current.question_id), deltas))
            if parent is None or parent.id in {s.individual.id for s in chain}:
                break
            current = parent
        return chain[::-1]

    def ancestors(self, individual_id: int) -> set[int]:
        """Every kernel the given one descends from, through any parent, and itself."""
        seen, todo = set(), [self.get(individual_id).id]
        while todo:
            current = todo.pop()
            if current not in seen and current in self.individuals:
                seen.add(current)
                todo.extend(self.individuals[current].parent_ids)
        return seen

    def descendants(self, individual_id: int, keep: set[int] | None = None) -> TreeNode:
        """The descendant tree of a kernel (only the ids in `keep`, when given)."""
        shown: set[int] = set()

        def grow(ind: Individual) -> TreeNode:
            node = TreeNode(ind, repeat=ind.id in shown)
            if node.repeat:
                return node
            shown.add(ind.id)
            node.children = [grow(c) for c in self.children(ind.id) if keep is None or c.id in keep]
            return node

        return grow(self.get(individual_id))

    def roots(self, ids: set[int]) -> list[int]:
        """The kernels among `ids` none of whose parents are among them."""
        return sorted(i for i in ids if not set(self.individuals[i].parent_ids) & ids)

    # -- whole-run statistics ---------------------------------------------------------------------
    def evaluated(self) -> list[Individual]:
        """Finished evaluations in the order they finished."""
        done = [i for i in self.individuals.values() if i.status in ("correct", "rejected")]
        return sorted(done, key=lambda i: (i.finished_at or i.created_at, i.id))

    def best_over_evaluations(self) -> pd.DataFrame:
        """evaluation (1-based), id, fitness (None when rejected), best so far, best id."""
        rows, best, best_id = [], None, None
        for n, ind in enumerate(self.evaluated(), start=1):
            if ind.fitness is not None and ind.status == "correct" and (best is None or ind.fitness > best):
                best, best_id = ind.fitness, ind.id
            rows.append({"evaluation": n, "id": ind.id, "status": ind.status, "fitness": ind.fitness,
                         "best": best, "best_id": best_id})
        return pd.DataFrame(rows, columns=["evaluation", "id", "status", "fitness", "best", "best_id"])

    def gain(self, ind: Individual) -> float | None:
        """Child fitness over its best parent's, when both are known."""
        fits = [p.fitness for p in self.parents(ind.id) if p.fitness]
        return ind.fitness / max(fits) if fits and ind.fitness and ind.status == "correct" else None

    def question_stats(self) -> pd.DataFrame:
        """Per question id: asked (children plus answered LLM calls that gave none; attempts that got no
        answer, such as rate-limited retries, are not counted), correct, improved, mean gain."""
        stats: dict[str, dict] = {}

        def entry(qid: str) -> dict:
            return stats.setdefault(qid, {"question_id": qid, "asked": 0, "correct": 0, "improved": 0, "gains": []})

        used_calls = set()
        for ind in self.individuals.values():
            if not ind.question_id:
                continue
            used_calls.add(ind.llm_call_id)
            row = entry(ind.question_id)
            row["asked"] += 1
            row["correct"] += ind.status == "correct"
            gain = self.gain(ind)
            if gain is not None:
                row["gains"].append(gain)
                row["improved"] += gain > 1
        for call in self.store.llm_calls():
            if call["question_id"] and call["id"] not in used_calls and call["response"] is not None:
                entry(call["question_id"])["asked"] += 1
        rows = []
        for row in stats.values():
            gains = row.pop("gains")
            row["mean_gain"] = sum(gains) / len(gains) - 1 if gains else None
            row["best_gain"] = max(gains) - 1 if gains else None
            row["text"] = self.question_text(row["question_id"]) or ""  # empty when unknown
            rows.append(row)
        columns = ["question_id", "asked", "correct", "improved", "mean_gain", "best_gain", "text"]
        frame = pd.DataFrame(rows, columns=columns)
        return frame.sort_values(["improved", "asked", "question_id"], ascending=[False, False, True],
                                 ignore_index=True)

    def failures(self) -> pd.DataFrame:
        """Rejections grouped by reason: reason, count, ids (most frequent first)."""
        names = set(self.scenario_names())
        groups: dict[str, list[int]] = {}
        for ind in self.individuals.values():
            if ind.status == "rejected":
                groups.setdefault(failure_reason(ind.failure or "", names), []).append(ind.id)
        rows = [{"reason": r, "count": len(ids), "ids": ids} for r, ids in groups.items()]
        frame = pd.DataFrame(rows, columns=["reason", "count", "ids"])
        return frame.sort_values(["count", "reason"], ascending=[False, True], ignore_index=True)

    def llm_cost(self) -> pd.DataFrame:
        """Per model: calls, cached answers, errors, tokens, cost, mean latency."""
        calls = pd.DataFrame(self.store.llm_calls(), columns=[
            "id", "model", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s", "cached", "error"])
        calls["failed"] = calls["error"].notna()
        frame = calls.groupby("model", as_index=False).agg(
            calls=("id", "count"), cached=("cached", "sum"), errors=("failed", "sum"),
            prompt_tokens=("prompt_tokens", "sum"), completion_tokens=("completion_tokens", "sum"),
            cost_usd=("cost_usd", "sum"), mean_latency_s=("latency_s", "mean"))
        return frame.sort_values("cost_usd", ascending=False, ignore_index=True)

    def retime(self, individual_id: int | None = None) -> dict | None:
        """The end-of-run re-timing of the best kernel against the seed (of `individual_id`, when given)."""
        record = self.store.meta().get("best_recheck")
        if not isinstance(record, dict) or (individual_id is not None and record.get("id") != individual_id):
            return None
        return record

    def summary(self) -> RunSummary:
        meta = self.store.meta()
        best = self.top(1)
        started = meta.get("started_at") or min((i.created_at for i in self.individuals.values()), default=None)
        return RunSummary(id=self.name, path=self.run_dir, status=str(meta.get("status", "unknown")),
                          task=meta.get("task") or (meta.get("config") or {}).get("task"),
                          stop_reason=meta.get("stop_reason"), evaluations=len(self.evaluated()),
                          correct=sum(i.status == "correct" for i in self.individuals.values()),
                          best=best[0].fitness if best else None, best_id=best[0].id if best else None,
                          cost_usd=self.store.total_cost(), started_at=started)

    # -- export -------------------------------------------------------------------------------------
    INDIVIDUAL_COLUMNS = ["id", "parent_ids", "generation", "operator", "question_id", "trigger", "model",
                          "llm_call_id", "status", "fitness", "fitness_over_parent", "failure", "language", "source",
                          "source_hash", "normalized_hash", "knobs", "created_at", "started_at", "finished_at",
                          "eval_seconds", "worker", "device"]

    def _table_columns(self, table: str) -> list[str]:
        """The columns of a table of the run's database (the header of an export with no rows)."""
        return [row[1] for row in self.store.db.execute(f"PRAGMA table_info({table})")]

    def individuals_table(self) -> pd.DataFrame:
        """One row per kernel (the harness report lives in the scenario table), with parent gain."""
        rows = []
        for ind in self.individuals.values():
            gain = self.gain(ind)
            rows.append({
                "id": ind.id, "parent_ids": ",".join(map(str, ind.parent_ids)), "generation": ind.generation,
                "operator": ind.operator, "question_id": ind.question_id, "trigger": ind.trigger,
                "model": ind.model, "llm_call_id": ind.llm_call_id, "status": ind.status, "fitness": ind.fitness,
                "fitness_over_parent": gain, "failure": ind.failure, "language": ind.language,
                "source": self.source_name(ind.id), "source_hash": ind.source_hash,
                "normalized_hash": ind.normalized_hash, "knobs": json.dumps(ind.knobs, sort_keys=True), "created_at": ind.created_at,
                "started_at": ind.started_at, "finished_at": ind.finished_at, "eval_seconds": ind.eval_seconds,
                "worker": ind.worker, "device": ind.device})
        return pd.DataFrame(rows, columns=self.INDIVIDUAL_COLUMNS)

    def scenarios_table(self) -> pd.DataFrame:
        """One row per kernel and scenario; the columns are there even when no kernel ran."""
        rows = [row for results in self._scenarios.values() for row in results]
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=self._table_columns("scenario_results"))

    def llm_calls_table(self) -> pd.DataFrame:
        """One row per LLM call; the columns are there even in a run without any."""
        rows = self.store.llm_calls()
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=self._table_columns("llm_calls"))


def find_runs(root: Path = DEFAULT_RUNS) -> list[RunSummary]:
    """Summaries of the runs under `root`, newest first; unreadable runs are skipped with a note."""
    if not root.is_dir():
        raise BadInput(f"no runs directory {root}/")
    summaries = []
    for path in iter_runs(root):
        try:
            with Lineage(path) as run:
                summaries.append(run.summary())
        except (BadInput, sqlite3.DatabaseError) as exc:
            summaries.append(RunSummary(path.name, path, f"unreadable: {exc}", None, None, 0, 0, None, None, 0.0, None))
    return summaries
