// The live page of `evokernel serve`: polls the JSON API, draws the report's charts (report.js) again when the
// run changes, and sends the actions with the server's token. Everything from a run (sources, answers, questions)
// is put in the page as text (textContent), never as HTML.
"use strict";
(function () {
  const charts = globalThis.evokernelCharts;
  const POLL_MS = 1500;
  const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
  if (hashToken) sessionStorage.setItem("evokernel-token", hashToken);
  const token = sessionStorage.getItem("evokernel-token") || "";
  const $ = (id) => document.getElementById(id);

  // An element with attributes and children; strings become text nodes, so nothing is parsed as HTML.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const key in attrs || {}) {
      if (key.startsWith("on")) node.addEventListener(key.slice(2), attrs[key]);
      else if (key === "class") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    }
    children.flat(Infinity).forEach((c) => node.append(c instanceof Node ? c : c === null || c === undefined ? "" : String(c)));
    return node;
  }

  // A table; the first column and those in `left` (indexes) are left-aligned, the others (numbers) right-aligned.
  function table(headers, rows, empty, left) {
    if (!rows.length) return h("p", { class: "note" }, empty || "none");
    const cls = (j) => (j === 0 || (left || []).includes(j) ? "l" : "");
    return h("table", {}, h("thead", {}, h("tr", {}, headers.map((c, j) => h("th", { class: cls(j) }, c)))),
             h("tbody", {}, rows.map((row) => h("tr", {}, row.map((c, j) => h("td", { class: cls(j) }, c))))));
  }

  const num = (v, digits) => (v === null || v === undefined ? "-" : Number(v).toFixed(digits === undefined ? 3 : digits));
  const pct = (v) => (v === null || v === undefined ? "-" : (v >= 0 ? "+" : "") + (100 * v).toFixed(1) + "%");
  const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "-");
  const kernelLink = (id) => h("a", { href: "#", class: "kernel-link", onclick: (e) => { e.preventDefault(); charts.open(id); } }, "#" + id);

  async function api(path, body) {
    const init = body === undefined ? {} : { method: "POST", body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", "X-Evokernel-Token": token } };
    let response;
    try { response = await fetch(path, init); } catch (e) { throw new Error("the server does not answer (stopped?)"); }
    const data = await response.json().catch(() => ({ error: response.status + " " + response.statusText }));
    if (!response.ok) throw new Error(data.error || response.statusText);
    return data;
  }

  function say(node, text, bad) { node.textContent = text; node.className = "result " + (bad ? "bad" : "ok"); }

  // -- the runs list --------------------------------------------------------------------------------------------
  async function showRuns() {
    $("runs").hidden = false;
    try {
      const data = await api("/api/runs");
      if (data.only) { location.replace("/runs/" + encodeURIComponent(data.only) + location.hash); return; }
      $("title").textContent = "evokernel runs";
      $("runs-table").replaceChildren(table(["run", "status", "task", "evaluations", "best geomean", "cost $", "started"],
        data.runs.map((r) => [h("a", { href: "/runs/" + encodeURIComponent(r.id) + location.hash }, r.id), r.status,
                               r.task || "-", r.evaluations + " (" + r.correct + " ok)",
                               r.best_id ? num(r.best) + " (#" + r.best_id + ")" : "-", num(r.cost_usd, 4), when(r.started_at)]),
        "no runs yet"));
      $("live-line").textContent = "updated " + new Date().toLocaleTimeString();
      $("page-error").hidden = true;
    } catch (e) { showError(e); }
    setTimeout(showRuns, 3 * POLL_MS);
  }

  function showError(e) { $("page-error").textContent = e.message; $("page-error").hidden = false; }

  // -- one run ----------------------------------------------------------------------------------------------------
  function showRun(run) {
    const base = "/api/runs/" + encodeURIComponent(run);
    let stamp = null, selected = null;
    $("run").hidden = false;
    $("title").textContent = "evokernel run " + run;
    document.title = "evokernel run " + run;

    function facts(s) {
      const out = ["status: " + s.status, "task: " + (s.task || "-"), "started: " + when(s.started_at),
                   "evaluations: " + s.evaluations + " (" + s.correct + " correct)",
                   "best geomean: " + (s.best_id ? num(s.best) + " (#" + s.best_id + ")" : "-"),
                   "LLM cost: $" + num(s.cost_usd, 4)];
      if (s.stop_reason) out.push("stopped: " + s.stop_reason);
      $("facts").replaceChildren(...out.map((f) => h("span", { class: f.startsWith("status: running") ? "running" : "" }, f)));
    }

    function draw(doc) {
      const c = doc.charts;
      ["progress-chart", "lineage-graph", "heatmap-chart"].forEach((id) => $(id).replaceChildren());
      $("lineage-legend").replaceChildren();
      charts.drawLineage($("lineage-graph"), c.graph, $("lineage-legend"));
      charts.drawProgress($("progress-chart"), c.progress);
      charts.drawHeatmap($("heatmap-chart"), c.heatmap);
      $("progress-note").textContent = "Each dot is a correct kernel (geomean speedup over " + doc.reference +
        "); red marks at the bottom are rejected kernels; the line is the best so far.";
    }

    function prompts(list) {
      const open = list.filter((p) => p.status === "open" || p.status.startsWith("answer given"));
      const box = $("prompt-list");
      box.querySelectorAll("[data-prompt]").forEach((node) => {
        if (!open.some((p) => p.id === node.dataset.prompt)) node.remove();
      });
      if (!open.length && !box.querySelector("[data-prompt]")) {
        box.replaceChildren(h("p", { class: "note" }, "no prompt waits for an answer"));
        return;
      }
      box.querySelectorAll("p.note").forEach((n) => n.remove());
      open.forEach((p) => {
        const existing = box.querySelector(`[data-prompt="${p.id}"]`);
        const line = p.id + " · " + p.operator + (p.question_id ? " · " + p.question_id : "") + " · parents " +
                     p.parent_ids.map((i) => "#" + i).join(", ") + " · " + p.status;
        if (existing) { existing.querySelector("summary").textContent = line; return; }
        box.append(promptForm(p, line));
      });
    }

    function promptForm(p, line) {
      const text = h("pre", {}, "…"), answer = h("textarea", { rows: 6, placeholder: "the answer: a fenced kernel or SEARCH/REPLACE edits" });
      const file = h("input", { type: "file" }), by = h("input", { placeholder: "who answers", size: 14 });
      const result = h("p", { class: "result" });
      file.addEventListener("change", async () => { if (file.files[0]) answer.value = await file.files[0].text(); });
      const node = h("details", { class: "kernel", "data-prompt": p.id,
        ontoggle: async () => { if (node.open && text.textContent === "…") text.textContent = (await api(base + "/prompts/" + p.id)).prompt; } },
        h("summary", {}, line), text,
        h("form", { class: "action", onsubmit: async (e) => {
          e.preventDefault();
          try { say(result, (await api(base + "/prompts/" + p.id + "/answer", { answer: answer.value, by: by.value })).message); }
          catch (err) { say(result, err.message, true); }
        } }, answer, h("label", {}, "upload ", file), by, h("button", { type: "submit" }, "Answer")), result);
      return node;
    }

    function tables(doc) {
      $("asked-table").replaceChildren(table(["request", "status", "asked at", "by", "target", "asked", "produced", "question", "text"],
        doc.asked.map((q) => [q.id, q.status, when(q.asked_at), q.asked_by || "-", q.target === "best" ? "best" : "#" + q.target,
                              q.outcomes.length + "/" + q.times, q.produced.join("; ") || "-", q.question_id, q.text]),
        "no question asked by a person yet", [1, 3, 6, 7, 8]));
      $("review-note").textContent = doc.bank_dir ? "Accepted questions go to the bank " + doc.bank_dir + " (as evokernel bank review --accept)."
        : "This server has no bank to accept questions into: start it with --bank DIR.";
      $("review-table").replaceChildren(table(["id", "status", "by", "after kernel", "text", ""],
        doc.review.map((q) => {
          const result = h("span", { class: "result" });
          const button = h("button", { onclick: async () => {
            try { say(result, (await api(base + "/review/" + encodeURIComponent(q.id) + "/accept", {})).message); }
            catch (err) { say(result, err.message, true); }
          } }, "Accept");
          return [q.id, q.status, q.by, q.from_individual ? kernelLink(q.from_individual) : "-", q.text,
                  q.status === "accepted" ? "" : h("span", {}, button, " ", result)];
        }), "no question offered for a bank yet", [1, 2, 4, 5]));
      $("failures-table").replaceChildren(table(["reason", "kernels", "examples"],
        doc.failures.map((f) => [f.reason, f.count, h("span", {}, f.ids.slice(0, 12).map((i) => [kernelLink(i), " "]))]),
        "no kernel was rejected", [2]));
      $("proposal-failures-table").replaceChildren(table(["operator", "reason", "proposals that made no kernel"],
        doc.proposal_failures.map((f) => [f.operator, f.kind, f.count]), "every proposal made a kernel", [1]));
      $("cost-table").replaceChildren(h("p", {}, "Total: $" + num(doc.cost.total_usd, 4) + Object.entries(doc.cost.failed)
          .map(([reason, n]) => " · failed (" + reason + "): " + n).join("")),
        table(["model", "calls", "cached", "errors", "prompt tokens", "completion tokens", "cost $", "mean latency s"],
          doc.cost.models.map((m) => [m.model, m.calls, m.cached, m.errors, m.prompt_tokens || 0, m.completion_tokens || 0,
                                       num(m.cost_usd, 4), num(m.mean_latency_s, 1)]), "no LLM call yet"));
      $("bank-stats-table").replaceChildren(table(["question", "asked", "correct", "better", "mean gain", "median gain", "text"],
        doc.bank_stats.map((q) => [q.question_id, q.asked, q.correct, q.better, pct(q.mean_gain), pct(q.median_gain), q.text || ""]),
        "no question asked yet", [6]));
    }

    function diff(text) {
      if (!text) return h("p", { class: "note" }, "identical sources");
      const kinds = { "+": "add", "-": "del", "@": "hunk" };
      return h("pre", { class: "diff" }, text.replace(/\n$/, "").split("\n").map((line) => {
        const kind = line.startsWith("+++") || line.startsWith("---") ? null : kinds[line[0]];
        return kind ? h("span", { class: kind }, line) : line + "\n";
      }));
    }

    async function showKernel(id, scroll) {
      selected = id;
      let k;
      try { k = await api(base + "/kernels/" + id); } catch (e) { $("kernel-detail").replaceChildren(h("p", { class: "bad" }, e.message)); return; }
      $("kernel-title").textContent = "Kernel #" + k.id + " · " + k.operator + (k.question_id ? " · " + k.question_id : "") + " · " +
        (k.status === "correct" ? num(k.fitness) + (k.gain !== null ? " (" + pct(k.gain) + " over parent)" : "") : k.status);
      const parts = [h("p", { class: "note" }, "parents: ", k.parent_ids.length ? k.parent_ids.map((p) => [kernelLink(p), " "]) : "none (seed)",
        " · generation " + k.generation + " · model: " + (k.model || "-") + " · trigger: " + (k.trigger || "-") + " · " + k.source_file)];
      if (k.question_id) parts.push(h("p", {}, h("b", {}, "Question " + k.question_id + (k.asked_by_person ? " (asked by a person)" : "") + ": "),
                                      k.question_text || "(text not in the bank or the run)"));
      if (k.failure) parts.push(h("p", { class: "bad" }, "rejected: " + k.failure));
      const against = (k.against_parents[0] || { scenarios: [] }).scenarios;
      parts.push(table(["scenario", "ok", "time ms", "speedup", "spread", "parent speedup", "vs parent", "error"],
        k.scenarios.map((s) => {
          const d = against.find((x) => x.scenario === s.name);
          return [s.name, h("span", { class: s.correct ? "ok" : "bad" }, s.correct ? "yes" : "no"), num(s.time_ms, 4),
                  num(s.speedup), s.spread === null ? "-" : (100 * s.spread).toFixed(1) + "%", d ? num(d.before) : "-",
                  d ? d.verdict : "-", s.error || ""];
        }), "no scenario results (rejected before running, or not evaluated yet)", [7]));
      k.diffs.forEach((d) => parts.push(h("details", { open: "" }, h("summary", {}, "diff against parent #" + d.parent), diff(d.diff))));
      parts.push(h("details", {}, h("summary", {}, "source"), h("pre", {}, k.source)));
      if (k.llm_call) parts.push(h("details", {}, h("summary", {}, "LLM exchange (" + k.llm_call.model + ", $" + num(k.llm_call.cost_usd, 4) + ")"),
        h("p", {}, h("b", {}, "prompt")), h("pre", {}, k.llm_call.prompt), h("p", {}, h("b", {}, "answer")),
        h("pre", { class: "answer" }, k.llm_call.response || k.llm_call.error || "")));
      if (k.build_log) parts.push(h("details", {}, h("summary", {}, "build log"), h("pre", {}, k.build_log)));
      $("kernel-detail").replaceChildren(...parts);
      if (scroll) $("kernel").scrollIntoView({ block: "start" });
    }
    charts.open = (id) => showKernel(Number(id), true);

    $("ask-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        const done = await api(base + "/ask", { question: $("ask-question").value, target: $("ask-target").value, times: $("ask-times").value });
        say($("ask-result"), [done.message, ...done.notes].join(" "));
        $("ask-question").value = "";
        stamp = null;
      } catch (err) { say($("ask-result"), err.message, true); }
    });

    async function refresh() {
      try {
        const now = (await api(base + "/stamp")).stamp;
        if (now !== stamp) {
          const doc = await api(base);
          facts(doc.summary);
          draw(doc);
          prompts(doc.prompts);
          tables(doc);
          if (selected !== null) await showKernel(selected, false);
          stamp = now;
          document.body.dataset.kernels = doc.charts.graph.nodes.length;
        }
        $("live-line").textContent = "live · updated " + new Date().toLocaleTimeString() + (token ? "" :
          " · no token in this page's address: actions will be refused (open the address evokernel serve printed)");
        $("page-error").hidden = true;
        document.body.dataset.rendered = "yes";
      } catch (e) { showError(e); }
      setTimeout(refresh, POLL_MS);
    }
    refresh();
  }

  const match = location.pathname.match(/^\/runs\/([^/]+)$/);
  if (match) showRun(decodeURIComponent(match[1])); else showRuns();
})();
