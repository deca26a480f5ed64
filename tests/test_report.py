"""The HTML report: embedded chart data, tables, kernel sections, escaping, and the `report` command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.lineage import Lineage
from evokernel.report import render_report
from evokernel.store import Store
from test_lineage_fixture import QUESTION_TEXT, SCENARIOS, add, make_run, report


def report_data(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert match, "no embedded chart data"
    return json.loads(match.group(1))


@pytest.fixture
def demo(tmp_path) -> Path:
    make_run(tmp_path / "demo")
    return tmp_path / "demo"


def test_chart_data_covers_the_top_kernels_and_their_ancestors(demo):
    with Lineage(demo) as run:
        data = report_data(render_report(run, top_k=10))
    nodes = {n["id"]: n for n in data["graph"]["nodes"]}
    assert set(nodes) == {1, 2, 3, 4, 5, 6}  # every correct kernel and #4, the rejected parent of #5
    assert nodes[4]["status"] == "rejected" and nodes[4]["fitness"] is None
    assert [nodes[i]["depth"] for i in (1, 2, 3, 4, 5, 6)] == [0, 1, 2, 3, 4, 3]
    assert all(nodes[i]["top"] for i in (1, 2, 3, 5, 6)) and not nodes[4]["top"]
    edges = {(e["source"], e["target"]): (e["label"], e["primary"]) for e in data["graph"]["edges"]}
    assert edges == {(1, 2): ("knob-mutation", True), (2, 3): ("q-layer", True), (3, 4): ("q-limit", True),
                     (4, 5): ("repair", True), (3, 6): ("q-layer", True), (2, 6): ("q-layer", False)}
    heat = data["heatmap"]
    assert heat["scenarios"] == list(SCENARIOS)
    assert [r["id"] for r in heat["rows"]] == [6, 3, 5, 2, 1]
    assert heat["rows"][0]["values"] == pytest.approx([2.2, 1.4, 1.9]) and all(heat["rows"][0]["correct"])
    assert [p["id"] for p in data["progress"]] == [1, 2, 3, 4, 5, 6, 7]
    assert data["progress"][3]["fitness"] is None and data["progress"][-1]["best_id"] == 6


def test_top_k_limits_the_graph_and_heatmap(demo):
    with Lineage(demo) as run:
        data = report_data(render_report(run, top_k=1))
    assert {n["id"] for n in data["graph"]["nodes"]} == {1, 2, 3, 6}
    assert [r["id"] for r in data["heatmap"]["rows"]] == [6]


def test_page_holds_tables_and_a_section_per_kernel(demo):
    with Lineage(demo) as run:
        page = render_report(run)
    for section in ("progress-chart", "lineage-graph", "heatmap-chart", "questions", "failures", "cost", "kernels"):
        assert f'id="{section}"' in page
    # the lineage of the top kernels, plus the rejected #7 as an example of its failure; not the pending #8
    assert all(f'id="k-{i}"' in page for i in (1, 2, 3, 4, 5, 6, 7)) and 'id="k-8"' not in page
    questions = page[page.index('id="questions"'):page.index('id="failures"')]
    assert "q-layer" in questions and QUESTION_TEXT in questions and "+23.2%" in questions
    failures = page[page.index('id="failures"'):page.index('id="cost"')]
    assert "candidate does not compile" in failures and 'href="#k-4"' in failures and 'href="#k-7"' in failures
    kernel7 = page[page.index('id="k-7"'):page.index("</details>\n", page.index('id="k-7"'))]
    assert "expected &#x27;;&#x27;" in kernel7 and "no scenario results" in kernel7
    assert "$0.0145" in page[page.index('id="cost"'):]
    kernel3 = page[page.index('id="k-3"'):page.index("</details>\n", page.index('id="k-3"'))]
    assert '<span class="add">+    int block = 64;</span>' in kernel3
    assert '<span class="del">-    int block = 32;</span>' in kernel3
    assert "&lt;kernel&gt;" in kernel3 and "int block = 64;\n```" in kernel3  # prompt (escaped) and answer
    assert "gcc -O3 ok" in kernel3 and '<span class="win">win</span>' in kernel3


def test_page_is_self_contained_and_escapes_kernel_text(demo):
    with Store(demo) as store:
        new = add(store, "question-mutation", [6], "</script><script>alert(1)</script>", "99",
                  report([3.0, 3.0, 3.0]), question_id="q-</script>")
    with Lineage(demo) as run:
        page = render_report(run)
    assert page.count("<script") == 2  # the chart data and the drawing code, nothing injected
    assert not re.search(r"""<link|\bsrc\s*=|url\(\s*['"]?(https?:)?//|@import""", page)
    data = report_data(page)
    assert any(e["label"] == "q-</script>" for e in data["graph"]["edges"])
    assert f'id="k-{new}"' in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page


def test_report_of_an_empty_run(tmp_path):
    Store(tmp_path / "empty", create=True).close()
    with Lineage(tmp_path / "empty") as run:
        page = render_report(run)
    data = report_data(page)
    assert data["graph"]["nodes"] == [] and data["heatmap"]["rows"] == [] and data["progress"] == []
    assert "no correct kernel yet" in page and "no question was asked" in page


def test_report_command(demo, tmp_path):
    out = tmp_path / "sub" / "report.html"
    result = CliRunner().invoke(main, ["report", str(demo), "-o", str(out), "--top", "2"])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert [r["id"] for r in report_data(out.read_text())["heatmap"]["rows"]] == [6, 3]
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nowhere"), "-o", str(out)])
    assert result.exit_code == 2 and result.output.startswith("error: no run ")
    (tmp_path / "a-file").write_text("")
    result = CliRunner().invoke(main, ["report", str(demo), "-o", str(tmp_path / "a-file" / "report.html")])
    assert result.exit_code == 2 and result.output.startswith("error: cannot write the report to ")


def test_speedups_are_labelled_with_the_runs_speed_reference(tmp_path):
    store = make_run(tmp_path / "cudnn-run", close=False)
    with Lineage(tmp_path / "cudnn-run") as run:
        assert run.speed_reference.words == "the task's original kernel"  # no config: the harness default
    store.set_meta("config", {"task": "attention-fwd", "speed_reference": "cudnn"})
    store.close()
    with Lineage(tmp_path / "cudnn-run") as run:
        page = render_report(run)
        assert str(run.speed_reference) == "cudnn" and run.speed_reference.described.startswith("cudnn (")
    assert "geomean speedup over cudnn;" in page and "Speedup over cudnn per scenario" in page
    assert "task's original kernel" not in page
