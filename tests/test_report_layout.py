"""The lineage graph's layout, computed by report.js under Node with a minimal DOM: edge labels never
cover a node (its circle or the value written under it) nor each other."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evokernel.lineage import Lineage
from evokernel.report import ASSETS, render_report
from test_lineage_fixture import add, make_run, report

NODE = shutil.which("node") or shutil.which("nodejs")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js to run report.js outside a browser")

R, NODE_HALF, CHAR = 15, 26, 6.2  # circle radius, half width of the value under a node, label char width

HARNESS = r"""
const fs = require("fs");
class El {
  constructor(tag) { this.tag = tag; this.attrs = {}; this.children = []; this.textContent = "";
                     this.dataset = {}; this.classList = { add() {} }; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return this.attrs[k]; }
  appendChild(c) { this.children.push(c); return c; }
  addEventListener() {}
}
const els = { "report-data": { textContent: fs.readFileSync(process.argv[2], "utf8") } };
for (const id of ["progress-chart", "lineage-graph", "lineage-legend", "heatmap-chart"]) els[id] = new El("svg");
global.document = { getElementById: (id) => els[id], createElementNS: (ns, tag) => new El(tag),
                    querySelectorAll: () => [], body: { dataset: {} } };
global.location = { hash: "" };
global.history = { replaceState() {} };
eval(fs.readFileSync(process.argv[3], "utf8"));
const nodes = [], labels = [];
(function walk(e) {
  if (e.tag === "g" && /^node( |$)/.test(e.attrs.class || "")) {
    const [x, y] = e.attrs.transform.match(/-?[\d.]+/g).map(Number);
    nodes.push({ id: +e.attrs["data-id"], x, y });
  }
  if (e.tag === "text" && e.attrs.class === "elabel") labels.push({ x: +e.attrs.x, y: +e.attrs.y, text: e.textContent });
  e.children.forEach(walk);
})(els["lineage-graph"]);
console.log(JSON.stringify({ nodes, labels, height: +els["lineage-graph"].attrs.height }));
"""


def layout(page: str, tmp_path: Path) -> dict:
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL).group(1)
    (tmp_path / "data.json").write_text(data.replace("<\\/", "</"))
    (tmp_path / "harness.js").write_text(HARNESS)
    out = subprocess.run([NODE, str(tmp_path / "harness.js"), str(tmp_path / "data.json"), str(ASSETS / "report.js")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def overlaps(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def boxes(drawn: dict) -> tuple[list, list]:
    label_boxes = [(l["x"] - len(l["text"]) * CHAR / 2, l["y"] - 10, l["x"] + len(l["text"]) * CHAR / 2, l["y"] + 2)
                   for l in drawn["labels"]]
    node_boxes = [(n["x"] - NODE_HALF, n["y"] - R, n["x"] + NODE_HALF, n["y"] + R + 15) for n in drawn["nodes"]]
    return label_boxes, node_boxes


def crowded_run(run_dir: Path) -> None:
    """A seed with five children asked long questions, grandchildren, and a crossover whose primary
    parent is two columns back (its edge and label skip a column of nodes)."""
    store = make_run(run_dir, close=False)
    long_ids = [f"is-the-{word}-tile-loaded-once-per-head-or-once-per-group-of-heads" for word in
                ("first", "second", "third", "fourth", "fifth")]
    children = [add(store, "question-mutation", [1], f"c{n}", str(200 + n), report([1.1 + n / 10] * 3),
                    question_id=qid) for n, qid in enumerate(long_ids)]
    grand = [add(store, "question-mutation", [c], f"g{c}", str(300 + c), report([1.8 + c / 100] * 3),
                 question_id="q-short") for c in children]
    add(store, "question-crossover", [children[0], grand[-1]], "x", "400", report([2.9] * 3), question_id="x-over")
    store.close()


def test_edge_labels_do_not_cover_nodes_or_each_other(tmp_path):
    crowded_run(tmp_path / "run")
    with Lineage(tmp_path / "run") as run:
        drawn = layout(render_report(run, top_k=20), tmp_path)
    labels, nodes = boxes(drawn)
    assert len(drawn["nodes"]) >= 15 and len(labels) >= 12
    for label, box in zip(drawn["labels"], labels):
        for node, other in zip(drawn["nodes"], nodes):
            assert not overlaps(box, other), f"label {label['text']!r} covers node #{node['id']}"
        assert box[3] <= drawn["height"]
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            assert not overlaps(a, b), (a, b)


def test_long_question_ids_are_shortened_to_fit_their_gap(tmp_path):
    crowded_run(tmp_path / "run")
    with Lineage(tmp_path / "run") as run:
        drawn = layout(render_report(run, top_k=20), tmp_path)
    texts = [l["text"] for l in drawn["labels"]]
    assert "q-short" in texts and any(t.startswith("is-the-") for t in texts)
    assert all(len(t) <= 60 for t in texts)
