/* The page's view kinds drawn beside workload_views.js: "gantt" (boxes on a time axis, a
 * row per lane: a pipeline's stages) and "grid" (the ranks as a grid, once per process
 * group name, the cells of one group one colour). workload_views.js asks
 * window.labctlViews[kind] for a kind it does not draw itself; this file runs first
 * (labctl/html/page.py). */
(function () {
  "use strict";
  const SVGNS = "http://www.w3.org/2000/svg";
  const KIND_COLORS = { F: "#4e79a7", B: "#f28e2b" };
  const GROUP_COLORS = ["#a0cbe8", "#ffbe7d", "#8cd17d", "#f1ce63", "#d4a6c8", "#86bcb6", "#ff9d9a", "#bab0ac"];
  function el(ns, tag, attrs, ...kids) {
    const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "text") node.textContent = v; else node.setAttribute(k, String(v));
    }
    kids.flat().forEach((kid) => kid && node.appendChild(typeof kid === "string" ? document.createTextNode(kid) : kid));
    return node;
  }
  const h = (tag, attrs, ...kids) => el(null, tag, attrs, ...kids);
  const s = (tag, attrs, ...kids) => el(SVGNS, tag, attrs, ...kids);
  function head(v, cls) {
    return h("div", { class: cls, id: v.id || null }, h("h3", { text: v.title }),
      v.caption ? h("p", { class: "caption", text: v.caption }) : null);
  }

  function gantt(v) {
    const wrap = head(v, "chart gantt");
    const rows = v.rows || [];
    const end = Math.max(1e-9, ...rows.flatMap((r) => (r.boxes || []).map((b) => Number(b.end) || 0)));
    const L = 150, R = 44, T = 8, rowH = 26, W = 900, H = T + rowH * rows.length + 30;
    const x = (t) => L + (W - L - R) * (Number(t) || 0) / end;
    const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": v.title });
    rows.forEach((r, i) => {
      const y = T + i * rowH;
      const g = s("g", { class: "gantt-row", "data-row": i });
      g.appendChild(s("rect", { x: L, y, width: W - L - R, height: rowH - 4, fill: "#f5f7fa", stroke: "#d8dee5" }));
      g.appendChild(s("text", { x: L - 6, y: y + rowH / 2 + 2, "text-anchor": "end", "font-size": 12 }, String(r.label)));
      (r.boxes || []).forEach((b) => {
        const x1 = x(b.begin), w = Math.max(1, x(b.end) - x1);
        const box = s("g", { class: "gantt-box", "data-kind": b.kind });
        box.appendChild(s("rect", { x: x1, y: y + 1, width: w, height: rowH - 6, fill: KIND_COLORS[b.kind] || "#9aa7b5", stroke: "#fff" },
          s("title", {}, `${b.label}: ${b.begin} → ${b.end} ms`)));
        if (w > 18) box.appendChild(s("text", { x: x1 + w / 2, y: y + rowH / 2 + 2, "text-anchor": "middle", "font-size": 10, fill: "#fff" }, String(b.label)));
        g.appendChild(box);
      });
      svg.appendChild(g);
    });
    const ya = T + rowH * rows.length + 4;
    for (let k = 0; k <= 4; k++) {
      const t = (end * k) / 4;
      svg.appendChild(s("line", { x1: x(t), x2: x(t), y1: T, y2: ya, stroke: "#d8dee5" }));
      svg.appendChild(s("text", { x: x(t), y: ya + 14, "text-anchor": "middle", "font-size": 11, fill: "#5c6773" }, `${t.toFixed(1)} ms`));
    }
    wrap.appendChild(svg);
    wrap.appendChild(h("div", { class: "legend" }, Object.entries(v.kinds || {}).map(([k, name]) =>
      h("span", {}, h("span", { class: "swatch", style: `background: ${KIND_COLORS[k] || "#9aa7b5"}` }), `${k}: ${name}`)),
      h("span", { text: "gaps: idle (the bubble)" })));
    return wrap;
  }

  function grid(v) {
    const wrap = head(v, "grid-view");
    const ranks = v.ranks || [], cols = Math.max(1, v.columns || ranks.length || 1);
    const box = h("div", { class: "grid-layers" });
    (v.layers || []).forEach((layer) => {
      const colorOf = new Map();
      (layer.groups || []).forEach((g, i) => g.forEach((r) => colorOf.set(r, i)));
      const table = h("table", { class: "rank-grid", "data-group": layer.name });
      for (let at = 0; at < ranks.length; at += cols) {
        table.appendChild(h("tr", {}, ranks.slice(at, at + cols).map((r) => {
          const i = colorOf.get(r);
          return h("td", { class: "num", "data-rank": r, style: i === undefined ? null : `background: ${GROUP_COLORS[i % GROUP_COLORS.length]}`,
            title: i === undefined ? "not in this group" : `${layer.name} [${layer.groups[i].join(", ")}]`, text: `rank ${r}` });
        })));
      }
      box.appendChild(h("figure", {}, h("figcaption", { text: `${layer.name}: ${(layer.groups || []).map((g) => "[" + g.join(", ") + "]").join(" ")}` }), table));
    });
    wrap.appendChild(box);
    return wrap;
  }

  window.labctlViews = Object.assign(window.labctlViews || {}, { gantt, grid });
})();
