"""The report in a real browser: headless Chromium loads it offline, runs its script without errors,
and draws the lineage graph, the heatmap and the progress chart.

Needs a Chromium (Debian: `apt-get install -y chromium`); skipped with a message where there is none.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evokernel.lineage import Lineage
from evokernel.report import write_report
from evokernel.store import Store
from test_lineage_fixture import SCENARIOS, make_run

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = next((path for path in map(shutil.which, BROWSERS) if path), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium found (apt-get install -y chromium)")


def chromium(page: Path, profile: Path, *mode: str) -> tuple[str, list[str]]:
    """Run headless Chromium on a file, offline; returns (stdout, console messages)."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0",
               f"--user-data-dir={profile}", "--hide-scrollbars", "--window-size=1400,2400", *mode, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # Chromium writes every console message and uncaught exception of the page as a CONSOLE log line.
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def test_report_renders_without_script_errors(tmp_path):
    make_run(tmp_path / "demo")
    with Lineage(tmp_path / "demo") as run:
        page = write_report(run, tmp_path / "report.html")
    dom, console = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console == [], console
    assert 'data-rendered="yes"' in dom  # the drawing script ran to its end
    graph = dom[dom.index('id="lineage-graph"'):dom.index("</svg>", dom.index('id="lineage-graph"'))]
    assert len(re.findall(r'<g class="node ', graph)) == 6
    assert sorted(map(int, re.findall(r'data-id="(\d+)"', graph))) == [1, 2, 3, 4, 5, 6]
    assert graph.count('class="edge"') == 5 and graph.count('class="edge secondary"') == 1
    assert re.findall(r'class="elabel"[^>]*>([^<]+)<', graph).count("q-layer") == 2
    heatmap = dom[dom.index('id="heatmap-chart"'):dom.index("</svg>", dom.index('id="heatmap-chart"'))]
    assert heatmap.count('class="cell"') == 5 * len(SCENARIOS)
    assert all(name in heatmap for name in SCENARIOS)
    progress = dom[dom.index('id="progress-chart"'):dom.index("</svg>", dom.index('id="progress-chart"'))]
    assert progress.count('class="eval-dot"') == 5 and progress.count('class="eval-rejected"') == 2
    assert 'class="best-line"' in progress


def test_screenshot_and_an_empty_run(tmp_path):
    Store(tmp_path / "empty", create=True).close()
    with Lineage(tmp_path / "empty") as run:
        page = write_report(run, tmp_path / "empty.html")
    dom, console = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console == [] and 'data-rendered="yes"' in dom
    shot = tmp_path / "shot.png"
    _, console = chromium(page, tmp_path / "profile2", f"--screenshot={shot}")
    assert console == [] and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
