"""The live page in a real browser: headless Chromium opens `evokernel serve`'s page on a run a live search is writing
(the scripted model on 127.0.0.1), the lineage graph grows without a reload, a question asked from the page is
refused without the token with a readable message, queued with it, and its child shows up in the graph with the
question; kernel text stays text. Screenshots go to $EVOKERNEL_SCREENSHOTS when set (docs/serve-*.png are made so).

Needs a Chromium (Debian: `apt-get install -y chromium`); skipped with a message where there is none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evokernel.bank.asked_questions import human_question_id
from headless_chromium import CHROMIUM, Chromium
from test_serve import QUESTION, human_children, live_search, serving

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium found (apt-get install -y chromium)")

NODES = "document.querySelectorAll('#lineage-graph g.node').length"


def ask_from_the_page(browser: Chromium, question: str) -> str:
    """Type the question into the page's form, send it, and return what the page says back."""
    browser.evaluate(f"document.getElementById('ask-result').textContent = '';"
                     f"document.getElementById('ask-question').value = {json.dumps(question)};"
                     "document.getElementById('ask-form').requestSubmit()")
    return browser.wait_for("document.getElementById('ask-result').textContent", 30)


@pytest.mark.slow
def test_the_page_follows_a_live_search_and_takes_a_question(tmp_path):
    shots = Path(os.environ.get("EVOKERNEL_SCREENSHOTS", tmp_path))
    with live_search(tmp_path, evaluations=12) as (driver, run_dir), serving(tmp_path / "runs") as (server, client), \
            Chromium(tmp_path / "profile") as browser:
        page = f"http://127.0.0.1:{server.port}/runs/{run_dir.name}"
        browser.open(page)  # without the token: the page shows the run, and says why an action is refused
        browser.wait_for("document.body.dataset.rendered === 'yes'")
        refused = ask_from_the_page(browser, QUESTION)
        assert "needs the server's token" in refused and "bad" in browser.evaluate(
            "document.getElementById('ask-result').className")
        assert not human_children(run_dir) and not list((run_dir / "questions").glob("*.json"))

        browser.send("Page.navigate", {"url": "about:blank"})
        browser.send("Page.navigate", {"url": f"{page}#token={server.token}"})
        browser.wait_for("document.body.dataset.rendered === 'yes' && "
                         "document.getElementById('live-line').textContent.includes('live')")
        first = browser.evaluate(NODES)
        assert first >= 1
        said = ask_from_the_page(browser, QUESTION)
        assert said.startswith("queued ") and "next free proposal slot" in said, said
        # the graph is drawn again as the run goes on, until the question's child is in it
        question_id = human_question_id(QUESTION)
        browser.wait_for(f"[...document.querySelectorAll('#lineage-graph g.node title')]"
                         f".some((t) => t.textContent.includes({json.dumps(question_id)}))", 240)
        assert browser.evaluate(NODES) > first
        browser.wait_for("[...document.querySelectorAll('#asked-table td')].some((td) => td.textContent.startsWith('#'))")

        [child] = human_children(run_dir)
        browser.evaluate(f"document.querySelector('#lineage-graph g.node[data-id=\"{child.id}\"]')"
                         ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        detail = browser.wait_for("document.getElementById('kernel-detail').textContent.includes('asked by a person') && "
                                  "document.getElementById('kernel-detail').textContent")
        assert QUESTION in detail and f"#{child.id}" in browser.evaluate("document.getElementById('kernel-title').textContent")
        assert f"parents: #{child.parent_ids[0]}" in detail
        # the source is shown as text: its characters are in a text node, not parsed into elements
        assert browser.evaluate("[...document.querySelectorAll('#kernel-detail pre')].some((p) => "
                                "p.textContent.includes('#include') && p.children.length === 0)")
        driver.wait(300)
        browser.wait_for("!document.getElementById('facts').textContent.includes('status: running')")
        browser.wait_for("!document.getElementById('kernel-title').textContent.endsWith('pending')")
        browser.screenshot(shots / "serve-kernel.png", "#kernel")
        browser.evaluate("scrollTo(0, 0)")
        browser.screenshot(shots / "serve-live.png", max_height=1900)
        assert browser.console == [], browser.console
    assert (shots / "serve-live.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
