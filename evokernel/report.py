"""The HTML report of a run: one self-contained file (inline CSS, JS and data; no network to view it).

Tables and kernel details are rendered here; the charts (best over evaluations, lineage graph,
per-scenario heatmap) are drawn in the browser by `report_assets/report.js` from embedded JSON.
Interface: `render_report`, `write_report`.
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime
from importlib import resources
from pathlib import Path

import pandas as pd

from evokernel.errors import BadInput
from evokernel.lineage import Lineage, compare_scenarios, describe_retime
from evokernel.lineage.statistics import (best_over_evaluations, failures, llm_cost, proposal_failures, question_stats,
                                          run_summary)
from evokernel.output import plain, scenario_table
from evokernel.store import Individual

ASSETS = resources.files("evokernel") / "report_assets"


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None or pd.isna(value) else format(value, spec)


def _pct(value: float | None) -> str:
    return "-" if value is None or pd.isna(value) else f"{100 * value:+.1f}%"


def kernel_link(kernel_id: int) -> str:
    return f'<a class="kernel-link" href="#k-{kernel_id}" data-id="{kernel_id}">#{kernel_id}</a>'


def _table(headers: list[str], rows: list[list[str]], left: set[int] = frozenset(), empty: str = "none") -> str:
    """An HTML table from already-escaped cells; `left` holds the indexes of left-aligned columns."""
    if not rows:
        return f'<p class="note">{_e(empty)}</p>'
    cls = lambda j: ' class="l"' if j in left else ""  # noqa: E731
    head = "".join(f"<th{cls(j)}>{_e(h)}</th>" for j, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td{cls(j)}>{c}</td>" for j, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _diff_html(diff: str) -> str:
    if not diff:
        return '<p class="note">identical sources</p>'
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    lines = []
    for line in diff.splitlines():
        kind = kinds.get(line[:1]) if not line.startswith(("+++", "---")) else None
        lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line) + "\n")
    return "<pre class=\"diff\">" + "".join(lines) + "</pre>"


# -- data for the charts ----------------------------------------------------------------------------

def _depths(run: Lineage, ids: set[int]) -> dict[int, int]:
    """Longest distance from a root of the subgraph (parents always have smaller ids)."""
    depth: dict[int, int] = {}
    for i in sorted(ids):
        parents = [p for p in run.individuals[i].parent_ids if p in ids]
        depth[i] = 1 + max(depth[p] for p in parents) if parents else 0
    return depth


def _node_label(run: Lineage, ind: Individual) -> str:
    question = f" · {ind.question_id}" if ind.question_id else ""
    result = f"geomean {_num(ind.fitness)}" if ind.status == "correct" else (ind.failure or ind.status)
    return f"#{ind.id} {ind.operator}{question} · {result}"


def chart_data(run: Lineage, top: list[Individual], graph_ids: set[int]) -> dict:
    depth = _depths(run, graph_ids)
    top_ids = {t.id for t in top}
    nodes = [{"id": i, "depth": depth[i], "fitness": run.individuals[i].fitness if run.individuals[i].status == "correct"
              else None, "status": run.individuals[i].status, "top": i in top_ids,
              "label": _node_label(run, run.individuals[i])} for i in sorted(graph_ids)]
    edges = [{"source": p, "target": i, "label": run.individuals[i].question_id or run.individuals[i].operator,
              "primary": k == 0}
             for i in sorted(graph_ids) for k, p in enumerate(run.individuals[i].parent_ids) if p in graph_ids]
    names = run.scenario_names()
    rows = []
    for ind in top:
        results = {r["name"]: r for r in run.scenarios(ind.id)}
        rows.append({"id": ind.id, "fitness": ind.fitness,
                     "values": [results.get(n, {}).get("speedup") for n in names],
                     "correct": [bool(results.get(n, {}).get("correct")) for n in names]})
    progress = json.loads(best_over_evaluations(run).to_json(orient="records"))
    return {"progress": progress, "graph": {"nodes": nodes, "edges": edges},
            "heatmap": {"scenarios": names, "rows": rows}}


# -- tables -------------------------------------------------------------------------------------------

def questions_html(run: Lineage) -> str:
    stats = question_stats(run)
    rows = [[_e(r.question_id), str(r.asked), str(r.correct), str(r.improved), _pct(r.mean_gain), _pct(r.best_gain),
             _e((r.text or "(text not in the bank or the run)") + run.question_note(r.question_id))]
            for r in stats.itertuples()]
    return _table(["question", "asked", "correct", "improved", "mean gain", "best gain", "text"], rows, {0, 6},
                  "no question was asked in this run")


FAILURE_EXAMPLES = 3  # rejected kernels per reason that get a section of their own


def failures_html(run: Lineage, shown: set[int]) -> str:
    frame = failures(run)
    rows = [[_e(r.reason), str(r.count), " ".join(kernel_link(i) if i in shown else f"#{i}"
                                                  for i in r.ids[:12]) + (" …" if len(r.ids) > 12 else "")]
            for r in frame.itertuples()]
    return _table(["reason", "kernels", "examples"], rows, {0, 2}, "no kernel was rejected")


def proposal_failures_html(run: Lineage) -> str:
    frame = proposal_failures(run)
    rows = [[_e(r.operator), _e(r.kind), str(r.count), f"<pre>{_e(r.example)}</pre>" if isinstance(r.example, str)
             else '<span class="dim">not recorded (a run recorded before they were kept)</span>']
            for r in frame.itertuples()]
    return _table(["operator", "reason", "proposals", "the first in full"], rows, {0, 1, 3},
                  "every proposal made a kernel (or a duplicate of one)")


def cost_html(run: Lineage) -> str:
    frame = llm_cost(run)
    rows = [[_e(r.model), str(r.calls), str(int(r.cached)), str(int(r.errors)), str(int(r.prompt_tokens or 0)),
             str(int(r.completion_tokens or 0)), f"${r.cost_usd:.4f}", _num(r.mean_latency_s, ".1f")]
            for r in frame.itertuples()]
    total = f'<p>Total: <b>${run.store.total_cost():.4f}</b> over {int(frame["calls"].sum())} LLM calls.</p>'
    failed = run.store.llm_failures()
    if failed:
        total += ("<p>Failed LLM calls by reason: " + ", ".join(f"{_e(reason)} <b>{n}</b>" for reason, n in failed.items())
                  + ".</p>")
    stopped = run.store.meta().get("llm_stopped")
    if stopped:
        total += f'<p class="bad">{_e(stopped)}</p>'
    return total + _table(["model", "calls", "cached", "errors", "prompt tokens", "completion tokens", "cost",
                           "mean latency s"], rows, {0}, "no LLM call in this run")


def _scenario_table(run: Lineage, ind: Individual) -> str:
    """The per-scenario table of the terminal (`scenario_table`), with the parent's speedup and the verdict
    against it before the error column."""
    rows = run.scenarios(ind.id)
    parent = run.parents(ind.id)[:1]
    deltas = {d.name: d for d in compare_scenarios(run.scenarios(parent[0].id), rows)} if parent else {}
    columns, cells = scenario_table(rows, run.speed_reference.column)
    headers = [column.name for column in columns]
    ok = headers.index("ok")
    out = []
    for r, row in zip(rows, cells):
        d = deltas.get(r["name"])
        verdict = f'<span class="{"win" if d.verdict in ("win", "fixed") else "loss" if d.verdict in ("loss", "broke") else "dim"}">' \
                  f"{d.verdict}</span>" if d else "-"
        escaped = [_e(plain(cell)) for cell in row]
        escaped[ok] = f'<span class="{"ok" if r["correct"] else "bad"}">{escaped[ok]}</span>'
        out.append([*escaped[:-1], _num(d.before if d else None), verdict, escaped[-1]])
    return _table([*headers[:-1], "parent speedup", "vs parent", headers[-1]], out, {0, len(headers) + 1},
                  "no scenario results (rejected before running, or pending)")


def kernel_html(run: Lineage, ind: Individual, rank: int | None) -> str:
    gain = run.gain(ind)
    result = (f'<span class="ok">{_num(ind.fitness)}</span>' + (f" ({_pct(gain - 1)} over parent)" if gain else "")
              if ind.status == "correct" else f'<span class="bad">{_e(ind.status)}</span>')
    title = f"#{ind.id} · {_e(ind.operator)}" + (f" · {_e(ind.question_id)}" if ind.question_id else "") + f" · {result}"
    if rank is not None:
        title = f"top {rank} · " + title
    parents = ", ".join(kernel_link(p) if p in run.individuals else f"#{p}" for p in ind.parent_ids) or "none (seed)"
    facts = [f"parents: {parents}", f"generation {ind.generation}", f"model: {_e(ind.model or '-')}",
             f"trigger: {_e(ind.trigger or '-')}", f"worker: {_e(ind.worker or '-')} on {_e(ind.device or '-')}",
             f"evaluated in {_num(ind.eval_seconds, '.1f')} s", f"source: {_e(run.source_name(ind.id))}"]
    parts = [f'<details class="kernel" id="k-{ind.id}"><summary>{title}</summary>',
             '<p class="note">' + " · ".join(facts) + "</p>"]
    text = run.question_text(ind.question_id)
    if ind.question_id:
        parts.append(f"<p><b>Question {_e(ind.question_id)}{_e(run.question_note(ind.question_id))}:</b> "
                     f"{_e(text or '(text not in the bank or the run)')}</p>")
    if ind.knobs:
        parts.append(f'<p class="note">knobs: {_e(json.dumps(ind.knobs, sort_keys=True))}</p>')
    if ind.failure:
        parts.append(f'<p class="bad">rejected: {_e(ind.failure)}</p>')
    parts.append(_scenario_table(run, ind))
    for p in run.parents(ind.id):
        parts.append(f"<details open><summary>diff against parent #{p.id}</summary>{_diff_html(run.diff(p.id, ind.id))}"
                     "</details>")
    parts.append(f"<details><summary>source</summary><pre>{_e(run.source(ind.id))}</pre></details>")
    call = run.llm_call(ind.id)
    if call:
        parts.append(f"<details><summary>LLM exchange ({_e(call['model'])}, ${call['cost_usd']:.4f}, "
                     f"{call['prompt_tokens'] or '?'} + {call['completion_tokens'] or '?'} tokens)</summary>"
                     f"<p><b>prompt</b></p><pre>{_e(call['prompt'])}</pre>"
                     f"<p><b>answer</b></p><pre>{_e(call['response'] or call['error'] or '')}</pre></details>")
    if ind.build_log:
        parts.append(f"<details><summary>build log</summary><pre>{_e(ind.build_log)}</pre></details>")
    return "".join(parts) + "</details>"


# -- the page ---------------------------------------------------------------------------------------------

def render_report(run: Lineage, top_k: int = 10) -> str:
    """The whole report as one HTML string."""
    top = run.top(top_k)
    graph_ids = set().union(*(run.ancestors(t.id) for t in top)) if top else set()
    summary = run_summary(run)
    started = datetime.fromtimestamp(summary.started_at).strftime("%Y-%m-%d %H:%M") if summary.started_at else "-"
    best = f"{_num(summary.best)} (#{summary.best_id})" if summary.best_id else "-"
    facts = [f"status: {summary.status}", f"task: {summary.task or '-'}", f"started: {started}",
             f"evaluations: {summary.evaluations} ({summary.correct} correct)", f"best geomean: {best}",
             f"LLM cost: ${summary.cost_usd:.4f}",
             f"failed proposals: {sum(f['count'] for f in summary.proposal_failures)}",
             *([f"stopped: {summary.stop_reason}"] if summary.stop_reason else [])]
    retime = run.retime(summary.best_id) if summary.best_id else None
    if retime:
        facts.append(f"best #{summary.best_id} {describe_retime(retime)}")
    examples = {i for ids in failures(run)["ids"] for i in ids[:FAILURE_EXAMPLES]}
    order = [t.id for t in top] + sorted((graph_ids | examples) - {t.id for t in top})
    ranks = {t.id: n for n, t in enumerate(top, start=1)}
    kernels = "\n".join(kernel_html(run, run.individuals[i], ranks.get(i)) for i in order)
    data = json.dumps(chart_data(run, top, graph_ids)).replace("</", "<\\/")
    fills = {"title": _e(f"evokernel run {summary.id}"), "facts": "".join(f"<span>{_e(f)}</span>" for f in facts),
             "top": str(len(top)), "reference": _e(run.speed_reference.words), "questions": questions_html(run), "failures": failures_html(run, set(order)),
             "proposal_failures": proposal_failures_html(run),
             "cost": cost_html(run), "kernels": kernels or '<p class="note">no correct kernel yet</p>', "data": data,
             "css": (ASSETS / "report.css").read_text(), "js": (ASSETS / "report.js").read_text()}
    return re.sub(r"\{\{(\w+)\}\}", lambda m: fills[m.group(1)], (ASSETS / "report.html").read_text())


def write_report(run: Lineage, path: Path, top_k: int = 10) -> Path:
    page = render_report(run, top_k)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page)
    except OSError as exc:
        raise BadInput(f"cannot write the report to {path}: {exc.strerror or exc}") from None
    return path
