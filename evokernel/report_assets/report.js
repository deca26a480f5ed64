// The charts of the report and of the live page (evokernel serve): best over evaluations, lineage graph,
// per-scenario heatmap, drawn from the report's chart data; no libraries, no network. The static report embeds
// its data in #report-data and is drawn at once; the live page draws through globalThis.evokernelCharts and
// sets its `open` to show a kernel that is clicked.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, parent, text) {
    const node = document.createElementNS(NS, tag);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(value) { return value === null || value === undefined ? "-" : value.toFixed(3); }

  // Viridis-like ramp for fitness, t in [0, 1].
  const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function ramp(t) {
    t = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
    const i = Math.min(Math.floor(t), RAMP.length - 2), f = t - i;
    const c = RAMP[i].map((v, k) => Math.round(v + f * (RAMP[i + 1][k] - v)));
    return "rgb(" + c.join(",") + ")";
  }

  // Diverging colour for a speedup: red below 1, white at 1, blue above (log scale, full at 2^span).
  function diverging(speedup, span) {
    if (speedup === null || speedup === undefined || !(speedup > 0)) return "#d0d4dc";
    const t = Math.max(-1, Math.min(1, Math.log2(speedup) / span));
    const to = t < 0 ? [200, 40, 40] : [30, 90, 200], a = Math.abs(t);
    return "rgb(" + to.map((v) => Math.round(255 + a * (v - 255))).join(",") + ")";
  }

  function openKernel(id) {
    const target = document.getElementById("k-" + id);
    if (!target) return;
    target.open = true;
    target.classList.add("flash");
    target.scrollIntoView({ block: "start" });
    history.replaceState(null, "", "#k-" + id);
  }

  const charts = { open: openKernel };

  function linked(node, id) {
    node.addEventListener("click", () => charts.open(id));
    return node;
  }

  function drawProgress(svg, rows) {
    const W = Math.max(640, Math.min(1400, 60 + rows.length * 14)), H = 300, L = 56, R = 16, T = 14, B = 40;
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    const fits = rows.map((r) => r.fitness).filter((v) => v !== null);
    if (!rows.length || !fits.length) {
      el("text", { x: L, y: H / 2 }, svg, rows.length ? "no correct kernel yet" : "no evaluation finished yet");
      return;
    }
    // The axis spans the best line; much slower kernels sit on the floor (hollow) so they cannot
    // flatten the gains that matter.
    const bests = rows.map((r) => r.best).filter((v) => v !== null);
    const lo = Math.min(1, ...bests) * 0.9, hi = Math.max(1, ...fits) * 1.05, n = rows.length;
    const x = (e) => L + (n === 1 ? 0.5 : (e - 1) / (n - 1)) * (W - L - R);
    const y = (v) => T + (1 - (Math.max(v, lo) - lo) / (hi - lo)) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = lo + (i / 4) * (hi - lo);
      el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }, svg);
      el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, svg, v.toFixed(2));
    }
    el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }, svg);
    el("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }, svg);
    const step = Math.max(1, Math.ceil(n / 10));
    for (let e = 1; e <= n; e += step) el("text", { x: x(e), y: H - B + 16, "text-anchor": "middle" }, svg, e);
    el("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, svg, "evaluation");
    el("text", { x: 14, y: (T + H - B) / 2, transform: "rotate(-90 14 " + (T + H - B) / 2 + ")", "text-anchor": "middle" },
       svg, "geomean speedup");
    if (lo < 1 && hi > 1) el("line", { x1: L, x2: W - R, y1: y(1), y2: y(1), class: "axis", "stroke-dasharray": "3 3" }, svg);
    let path = "", prev = null;
    rows.forEach((r) => {
      if (r.best === null) return;
      const px = x(r.evaluation);
      path += prev === null ? `M${px},${y(r.best)}` : `L${px},${y(prev)}L${px},${y(r.best)}`;
      prev = r.best;
    });
    el("path", { d: path, stroke: "#1f5fbf", "stroke-width": 2, fill: "none", class: "best-line" }, svg);
    rows.forEach((r) => {
      if (r.fitness !== null) {
        const floor = r.fitness < lo;
        const dot = linked(el("circle", { cx: x(r.evaluation), cy: y(r.fitness), r: 4, class: "eval-dot",
                                          fill: floor ? "#fff" : "#33405a", stroke: "#33405a", "fill-opacity": floor ? 1 : 0.7 },
                              svg), r.id);
        el("title", {}, dot, "evaluation " + r.evaluation + ": kernel #" + r.id + ", " + fmt(r.fitness));
      } else {
        const mark = linked(el("text", { x: x(r.evaluation), y: H - B - 3, "text-anchor": "middle", fill: "#b42318",
                                         class: "eval-rejected" }, svg, "×"), r.id);
        el("title", {}, mark, "evaluation " + r.evaluation + ": kernel #" + r.id + " rejected");
      }
    });
  }

  function drawLineage(svg, graph, legend) {
    if (!graph.nodes.length) { el("text", { x: 10, y: 20 }, svg, "no correct kernel yet"); svg.setAttribute("height", 30); return; }
    const byId = new Map(graph.nodes.map((n) => [n.id, n]));
    const layers = [];
    graph.nodes.forEach((n) => { (layers[n.depth] = layers[n.depth] || []).push(n); });
    const parentsOf = new Map(graph.nodes.map((n) => [n.id, []]));
    graph.edges.forEach((e) => parentsOf.get(e.target).push(e.source));
    // Order each layer by the mean position of its parents (one barycentre pass keeps lines short).
    const slot = new Map();
    layers.forEach((layer) => {
      layer.forEach((n) => {
        const ps = parentsOf.get(n.id).filter((p) => slot.has(p));
        n.bary = ps.length ? ps.reduce((s, p) => s + slot.get(p), 0) / ps.length : n.id;
      });
      layer.sort((a, b) => a.bary - b.bary || a.id - b.id);
      layer.forEach((n, i) => slot.set(n.id, i - (layer.length - 1) / 2));
    });
    // Edge labels sit in the gap between two columns of nodes, clear of the circles and of the values
    // written under them: the gap grows with the longest label (up to a limit; longer ones are shortened).
    const R = 15, NODE_HALF = 26, PAD = 4, CHAR = 6.2, LABEL_DY = 12;
    const labelled = graph.edges.filter((e) => e.label && e.primary);
    const longest = Math.max(0, ...labelled.map((e) => e.label.length));
    const DX = Math.max(170, Math.min(420, 2 * (NODE_HALF + PAD) + longest * CHAR));
    const room = DX - 2 * (NODE_HALF + PAD), fitChars = Math.floor(room / CHAR);
    const DY = 64, widest = Math.max(1, ...layers.map((l) => l.length));
    const W = 60 + (layers.length - 1) * DX + 80, H = widest * DY + 30;
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    const px = (n) => 40 + n.depth * DX, py = (n) => H / 2 + slot.get(n.id) * DY;
    const fits = graph.nodes.map((n) => n.fitness).filter((v) => v !== null);
    const lo = Math.min(...fits), hi = Math.max(...fits);
    const colour = (n) => (n.fitness === null ? "#e4e7ec" : ramp(hi > lo ? (n.fitness - lo) / (hi - lo) : 1));
    const edges = el("g", { class: "edges" }, svg), nodes = el("g", { class: "nodes" }, svg);
    const gaps = new Map();  // target depth -> labels in the gap before that column
    graph.edges.forEach((e) => {
      const a = byId.get(e.source), b = byId.get(e.target);
      const x1 = px(a) + R, y1 = py(a), x2 = px(b) - R, y2 = py(b), mx = (x1 + x2) / 2;
      el("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, class: "edge" + (e.primary ? "" : " secondary") }, edges);
      if (!(e.label && e.primary)) return;
      // where the curve crosses the middle of the last gap before the target (an edge may skip columns)
      const gx = px(b) - DX / 2;
      let lo = 0, hi = 1;
      const bx = (t) => (1 - t) ** 3 * x1 + 3 * (1 - t) ** 2 * t * mx + 3 * (1 - t) * t * t * mx + t ** 3 * x2;
      for (let i = 0; i < 40; i++) { const t = (lo + hi) / 2; if (bx(t) < gx) lo = t; else hi = t; }
      const t = (lo + hi) / 2, cy = (1 - t) ** 3 * y1 + 3 * (1 - t) ** 2 * t * y1 + 3 * (1 - t) * t * t * y2 + t ** 3 * y2;
      (gaps.get(b.depth) || gaps.set(b.depth, []).get(b.depth)).push({ x: gx, y: cy - 4, label: e.label });
    });
    gaps.forEach((labels) => {  // labels of one gap never share a line
      labels.sort((p, q) => p.y - q.y);
      labels.forEach((l, i) => { if (i) l.y = Math.max(l.y, labels[i - 1].y + LABEL_DY); });
      labels.forEach((l) => {
        const short = l.label.length > fitChars ? l.label.slice(0, Math.max(1, fitChars - 1)) + "…" : l.label;
        const text = el("text", { x: l.x, y: l.y, "text-anchor": "middle", class: "elabel" }, edges, short);
        if (short !== l.label) el("title", {}, text, l.label);
      });
      svg.setAttribute("height", Math.max(+svg.getAttribute("height"), labels[labels.length - 1].y + 8));
    });
    graph.nodes.forEach((n) => {
      const g = linked(el("g", { class: "node " + n.status + (n.top ? " top" : ""), "data-id": n.id,
                                 transform: `translate(${px(n)},${py(n)})` }, nodes), n.id);
      el("circle", { r: R, fill: colour(n) }, g);
      const light = n.fitness === null || hi <= lo || (n.fitness - lo) / (hi - lo) > 0.6;
      el("text", { y: 4, "text-anchor": "middle", style: light ? "" : "fill:#fff" }, g, n.id);
      el("text", { y: R + 13, "text-anchor": "middle" }, g, n.fitness === null ? n.status : fmt(n.fitness));
      el("title", {}, g, n.label);
    });
    if (fits.length) {
      const stops = RAMP.map((c, i) => `rgb(${c.join(",")}) ${(100 * i) / (RAMP.length - 1)}%`).join(",");
      legend.innerHTML = `<span>${fmt(lo)}</span><span class="bar" style="background:linear-gradient(90deg,${stops})"></span>` +
                         `<span>${fmt(hi)}</span><span>geomean speedup</span>`;
    }
  }

  function drawHeatmap(svg, heat) {
    const CW = 46, CH = 24, L = 110, names = heat.scenarios;
    const longest = Math.max(8, ...names.map((n) => n.length)), T = 20 + longest * 5.2;
    const W = L + names.length * CW + longest * 5.6, H = T + heat.rows.length * CH + 10;
    const logs = heat.rows.flatMap((r) => r.values.filter((v) => v > 0).map((v) => Math.abs(Math.log2(v))));
    const span = Math.max(1, ...logs);
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    if (!heat.rows.length) { el("text", { x: 10, y: 20 }, svg, "no correct kernel yet"); svg.setAttribute("height", 30); return; }
    names.forEach((name, j) => {
      const x = L + j * CW + CW / 2;
      el("text", { x: x, y: T - 6, transform: `rotate(-50 ${x} ${T - 6})`, class: "scenario" }, svg, name);
    });
    heat.rows.forEach((row, i) => {
      const y = T + i * CH;
      linked(el("text", { x: L - 8, y: y + CH / 2 + 4, "text-anchor": "end", style: "cursor:pointer" }, svg,
                "#" + row.id + "  " + fmt(row.fitness)), row.id);
      row.values.forEach((v, j) => {
        const cell = linked(el("rect", { x: L + j * CW, y: y, width: CW, height: CH, class: "cell",
                                         fill: row.correct[j] ? diverging(v, span) : "#d0d4dc" }, svg), row.id);
        el("title", {}, cell, `#${row.id} on ${names[j]}: ${row.correct[j] ? fmt(v) + "x" : "failed"}`);
        const dark = v && Math.abs(Math.log2(v)) / span > 0.6;
        el("text", { x: L + j * CW + CW / 2, y: y + CH / 2 + 4, "text-anchor": "middle", "pointer-events": "none",
                     style: dark ? "fill:#fff" : "" }, svg, v === null ? "-" : v.toFixed(2));
      });
    });
  }

  Object.assign(charts, { drawProgress, drawLineage, drawHeatmap, fmt });
  globalThis.evokernelCharts = charts;
  const embedded = document.getElementById("report-data");
  if (!embedded) return;
  const data = JSON.parse(embedded.textContent);
  drawProgress(document.getElementById("progress-chart"), data.progress);
  drawLineage(document.getElementById("lineage-graph"), data.graph, document.getElementById("lineage-legend"));
  drawHeatmap(document.getElementById("heatmap-chart"), data.heatmap);
  document.querySelectorAll("a.kernel-link").forEach((a) => a.addEventListener("click", (ev) => {
    ev.preventDefault(); openKernel(a.dataset.id);
  }));
  if (location.hash.startsWith("#k-")) openKernel(location.hash.slice(3));
  document.body.dataset.rendered = "yes";
})();
