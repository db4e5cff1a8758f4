/* Each workload's section of the run page: its plugin's views drawn by kind (text, table,
 * group, before_after, messages, lines, matrix; another kind from window.labctlViews,
 * views.js). docs/report.md lists the kinds and their fields. */
(function () {
  "use strict";
  const { D, PALETTE, drawErrors, drawn, h, s, num, bytes, section, table } = window.labctlPage;

  function workloads() {
    const frag = [];
    for (const w of D.workloads || []) {
      frag.push(drawn(`data-${w.workload}`, `Workload ${w.workload}`, () => {
        const sec = section(`data-${w.workload}`, `Workload ${w.workload}`);
        sec.setAttribute("data-workload", w.workload);
        for (const v of w.views) sec.appendChild(drawnView(v, w.workload));
        return sec;
      }));
    }
    return frag;
  }
  // A figure that cannot draw itself costs itself: a note in its place, named above.
  function drawnView(v, workload) {
    try {
      return view(v);
    } catch (err) {
      const what = `workload ${workload}'s view ${(v && (v.id || v.title || v.kind)) || "?"}`;
      drawErrors.push(`${what} could not be drawn: ${err}`);
      return h("p", { class: "bad draw-error", text: `(${what} could not be drawn: ${err})` });
    }
  }
  function view(v) {
    switch (v.kind) {
      case "text": return textView(v);
      case "table": return h("div", { class: "view-table", id: v.id || null },
        h("h3", { text: v.title }), v.caption ? h("p", { class: "caption", text: v.caption }) : null,
        table(v.columns, v.rows));
      case "group": return h("details", { class: "group", open: true, id: v.id || null },
        h("summary", { text: v.title }), v.caption ? h("p", { class: "caption", text: v.caption }) : null,
        h("div", { class: "figures" }, v.views.map(view)));
      case "before_after": return beforeAfter(v);
      case "messages": return messagesView(v);
      case "lines": return linesView(v);
      case "matrix": return matrixView(v);
      default: {
        const other = (window.labctlViews || {})[v.kind];      // views.js: gantt, grid
        return other ? other(v) : h("p", { class: "muted", text: `(a view of kind ${v.kind} this page cannot draw)` });
      }
    }
  }
  // A paragraph; one with bold spans (a verdict: "Node 2 is slow") is text to read, not a
  // caption: as bold here as on the terminal.
  function textView(v) {
    const strong = Array.isArray(v.strong) ? v.strong : [];
    if (!strong.length) return h("p", { class: "caption", id: v.id || null, text: v.text });
    const p = h("p", { class: "verdict", id: v.id || null });
    let at = 0;
    for (const [a, b] of strong) {
      if (a > at) p.appendChild(document.createTextNode(v.text.slice(at, a)));
      p.appendChild(h("strong", { text: v.text.slice(a, b) }));
      at = b;
    }
    if (at < v.text.length) p.appendChild(document.createTextNode(v.text.slice(at)));
    return p;
  }
  function beforeAfter(v) {
    const grid = h("div", { class: "ba-grid" },
      h("span", { class: "hd" }), h("span", { class: "hd", text: "before" }), h("span", { class: "hd" }),
      h("span", { class: "hd", text: "after" }), h("span", { class: "hd" }));
    for (const r of v.ranks) {
      const isRoot = v.root !== null && v.root !== undefined && r.rank === v.root;
      const label = `rank ${r.rank}` + (r.replica !== null && r.replica !== undefined ? ` (replica ${r.replica})` : "")
        + (isRoot ? " root" : "") + (r.group ? ` in [${r.group.join(",")}]` : "");
      grid.appendChild(h("span", { class: "rk" + (isRoot ? " root" : ""), text: label }));
      grid.appendChild(heldNode(r.before, r.rank, "before"));
      grid.appendChild(h("span", { class: "muted", text: "→" }));
      grid.appendChild(heldNode(r.after, r.rank, "after"));
      grid.appendChild(r.ok === null || r.ok === undefined ? h("span", {})
        : h("span", { class: r.ok ? "ok" : "bad", title: r.ok ? "its check passed" : "its check failed", text: r.ok ? "✓" : "✗" }));
    }
    const width = (held) => !held ? 0 : Array.isArray(held.list) ? held.list.reduce((k, x) => k + width(x), 0) : (held.values || []).length;
    const wide = Math.max(...v.ranks.map((r) => Math.max(width(r.before), width(r.after)))) > 8;
    return h("figure", { class: "ba" + (wide ? " wide" : ""), "data-call": v.call, id: `call-${v.call}` },
      h("figcaption", { text: v.title }), grid);
  }

  // What a rank held: a tensor's first values as chips, a list as a bracketed group.
  function heldNode(held, rank, phase) {
    const box = h("div", { class: "held", "data-rank": rank, "data-phase": phase });
    box.appendChild(heldInner(held));
    return box;
  }
  function heldInner(held) {
    if (held === null || held === undefined) return h("span", { class: "none", text: "—" });
    if (Array.isArray(held.list)) {
      const group = h("span", { class: "lst" });
      held.list.forEach((item) => group.appendChild(heldInner(item)));
      if (held.len > held.list.length) group.appendChild(h("span", { class: "more", text: `+${held.len - held.list.length}` }));
      return group;
    }
    const frag = h("span", { class: "lst tensor", title: `shape [${(held.shape || []).join(", ")}] ${held.dtype || ""}, ${held.numel} element(s)` });
    (held.values || []).forEach((v) => frag.appendChild(h("span", { class: "v", text: num(v, 7) })));
    if (held.numel > (held.values || []).length) frag.appendChild(h("span", { class: "more", text: `… ${held.numel} total` }));
    return frag;
  }
  function heldText(held) {
    if (held === null || held === undefined) return "—";
    if (Array.isArray(held.list)) return "[" + held.list.map(heldText).join(", ") + "]";
    return "[" + (held.values || []).map((v) => num(v, 7)).join(", ") + (held.numel > (held.values || []).length ? ", …" : "") + "]";
  }
  function sameHeld(a, b) { return JSON.stringify(a && a.values) === JSON.stringify(b && b.values); }

  function messagesView(v) {
    const wrap = h("div", { class: "messages", id: `p2p-${v.id}`, "data-call": v.id },
      h("h3", { text: v.title }), v.caption ? h("p", { class: "caption", text: v.caption }) : null);
    const ranks = v.ranks;
    const msgs = v.messages;
    const bad = (m) => !m.sent || !m.received || !sameHeld(m.sent, m.received);
    let svg;
    if (v.layout === "sequence") {
      const hops = [...new Set(msgs.map((m) => m.hop))].sort((a, b) => a - b);
      const W = Math.max(420, 260 * ranks.length), H = 60 + 52 * hops.length;
      const X = (r) => 40 + (ranks.indexOf(r) + 0.5) * ((W - 80) / ranks.length);
      svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": v.title });
      svg.appendChild(arrowDefs(v.id));
      ranks.forEach((r) => {
        svg.appendChild(s("text", { x: X(r), y: 18, "text-anchor": "middle", "font-size": 13, "font-weight": 600 }, `rank ${r}`));
        svg.appendChild(s("line", { x1: X(r), y1: 26, x2: X(r), y2: H - 8, stroke: "#9aa7b5", "stroke-dasharray": "4 3" }));
      });
      msgs.forEach((m) => {
        const y = 44 + 46 * hops.indexOf(m.hop);
        const x1 = X(m.src), x2 = X(m.dst);
        const color = bad(m) ? "#c62828" : "#2457c5";
        svg.appendChild(s("line", { x1, y1: y + 4, x2, y2: y + 28, stroke: color, "stroke-width": 2, "marker-end": `url(#arrow-${v.id})` }));
        svg.appendChild(s("text", { x: (x1 + x2) / 2, y: y - 2, "text-anchor": "middle", "font-size": 12, fill: color },
          `hop ${m.hop}: ${m.send_op || "?"} ${heldText(m.sent)} → ${m.recv_op || "?"} ${heldText(m.received)}`));
      });
    } else {
      const R = Math.max(70, 24 * ranks.length), W = 2 * R + 200, H = 2 * R + 90, cx = W / 2, cy = H / 2;
      const pos = new Map(ranks.map((r, i) => {
        const a = -Math.PI / 2 + (2 * Math.PI * i) / ranks.length;
        return [r, [cx + R * Math.cos(a), cy + R * Math.sin(a)]];
      }));
      svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": v.title });
      svg.appendChild(arrowDefs(v.id));
      msgs.forEach((m) => {
        const a = pos.get(m.src), b = pos.get(m.dst);
        if (!a || !b) return;
        const dx = b[0] - a[0], dy = b[1] - a[1], len = Math.hypot(dx, dy) || 1;
        const ux = dx / len, uy = dy / len, nx = -uy, ny = ux, bend = 18;
        const p1 = [a[0] + ux * 20, a[1] + uy * 20], p2 = [b[0] - ux * 22, b[1] - uy * 22];
        const c = [(p1[0] + p2[0]) / 2 + nx * bend, (p1[1] + p2[1]) / 2 + ny * bend];
        const color = bad(m) ? "#c62828" : "#2457c5";
        svg.appendChild(s("path", { d: `M${p1[0]},${p1[1]} Q${c[0]},${c[1]} ${p2[0]},${p2[1]}`, fill: "none", stroke: color, "stroke-width": 2, "marker-end": `url(#arrow-${v.id})` }));
        const label = sameHeld(m.sent, m.received) ? heldText(m.sent) : `${heldText(m.sent)}→${heldText(m.received)}`;
        svg.appendChild(s("text", { x: c[0] + nx * 8, y: c[1] + ny * 8 + 4, "text-anchor": "middle", "font-size": 12, fill: color }, label));
      });
      ranks.forEach((r) => {
        const [x, y] = pos.get(r);
        svg.appendChild(s("circle", { cx: x, cy: y, r: 17, fill: "#eef3ff", stroke: "#2457c5", "stroke-width": 1.5 }));
        svg.appendChild(s("text", { x, y: y + 4, "text-anchor": "middle", "font-size": 12, "font-weight": 600 }, String(r)));
      });
    }
    wrap.appendChild(svg);
    wrap.appendChild(h("ol", { class: "msg-list" }, msgs.map((m) => h("li", {
      class: bad(m) ? "bad" : null, "data-src": m.src, "data-dst": m.dst, "data-hop": m.hop,
    }, `rank ${m.src} → rank ${m.dst}` + (m.hop ? ` (hop ${m.hop})` : "") + `: ${m.send_op || "?"} `,
      h("span", { class: "sent", text: heldText(m.sent) }), `, ${m.recv_op || "nothing recorded"} `,
      h("span", { class: "received", text: heldText(m.received) })))));
    return wrap;
  }
  function arrowDefs(id) {
    return s("defs", {}, s("marker", { id: `arrow-${id}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      s("path", { d: "M0,0 L10,5 L0,10 z", fill: "context-stroke" })));
  }

  // A square heat map (row sends to column): each cell shaded by its share of the largest,
  // the marked ones (slow pairs) ringed.
  function matrixView(v) {
    const top = Math.max(0, ...v.cells.flat().filter((x) => typeof x === "number" && isFinite(x)));
    const marked = new Set(v.marked.map(([i, j]) => `${i},${j}`));
    return h("div", { class: "view-table matrix", id: v.id || null },
      h("h3", { text: v.title }), v.caption ? h("p", { class: "caption", text: v.caption }) : null,
      h("table", {},
        h("thead", {}, h("tr", {}, h("th", { text: "from \\ to" }), v.labels.map((l) => h("th", { text: l })))),
        h("tbody", {}, v.labels.map((label, i) => h("tr", {}, h("th", { text: label }),
          v.labels.map((_, j) => {
            const value = v.cells[i][j];
            const share = typeof value === "number" && top > 0 ? value / top : null;
            return h("td", {
              class: "num" + (marked.has(`${i},${j}`) ? " bad slow" : ""), "data-src": i, "data-dst": j,
              style: share === null ? null : `background: rgba(36, 87, 197, ${(0.08 + 0.6 * share).toFixed(3)})`,
              title: share === null ? null : `${Math.round(100 * share)} % of the fastest pair`,
              text: String(v.texts[i][j] === null || v.texts[i][j] === undefined ? "" : v.texts[i][j]),
            });
          }))))));
  }

  // A line chart in SVG (log or linear axes), for loss curves and bench sweeps.
  function linesView(v) {
    // the legend is the page's own (HTML beside the plot, wrapping under it when narrow):
    // in the SVG's margin a long series name was cut ("one process, whole batc")
    const W = 540, H = 320, L = 64, R = 18, T = 16, B = 44;
    const pts = v.series.flatMap((se) => se.points).filter((p) => typeof p[0] === "number" && typeof p[1] === "number");
    const wrap = h("div", { class: "chart", id: v.id || null }, h("h3", { text: v.title }),
      v.caption ? h("p", { class: "caption", text: v.caption }) : null);
    if (!pts.length) { wrap.appendChild(h("p", { class: "muted", text: "no points" })); return wrap; }
    const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
    if (v.ceiling && typeof v.ceiling.y === "number") ys.push(v.ceiling.y);
    const sx = scale(Math.min(...xs), Math.max(...xs), L, W - R, v.x.log, /bytes/.test(v.x.label || ""));
    const sy = scale(Math.min(...ys), Math.max(...ys), H - B, T, v.y.log, false);
    const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "linechart", role: "img", "aria-label": v.title });
    svg.appendChild(s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fbfcfe", stroke: "#d8dee5" }));
    const bytesAxis = /bytes/.test(v.x.label || "");
    for (const t of sx.ticks) {
      svg.appendChild(s("line", { x1: sx(t), x2: sx(t), y1: T, y2: H - B, stroke: "#eef1f4" }));
      svg.appendChild(s("text", { x: sx(t), y: H - B + 16, "text-anchor": "middle", "font-size": 11, fill: "#5c6773" }, bytesAxis ? bytes(t) : num(t, 3)));
    }
    for (const t of sy.ticks) {
      svg.appendChild(s("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), stroke: "#eef1f4" }));
      svg.appendChild(s("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end", "font-size": 11, fill: "#5c6773" }, num(t, 3)));
    }
    svg.appendChild(s("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle", "font-size": 12 }, v.x.label));
    svg.appendChild(s("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 12, transform: `rotate(-90 14 ${(T + H - B) / 2})` }, v.y.label));
    if (v.ceiling && typeof v.ceiling.y === "number") {
      svg.appendChild(s("line", { class: "ceiling", x1: L, x2: W - R, y1: sy(v.ceiling.y), y2: sy(v.ceiling.y), stroke: "#c62828", "stroke-width": 2, "stroke-dasharray": "6 4" }));
      svg.appendChild(s("text", { x: W - R - 4, y: sy(v.ceiling.y) - 5, "text-anchor": "end", "font-size": 11, fill: "#c62828" }, v.ceiling.label || "ceiling"));
    }
    v.series.forEach((se, i) => {
      const color = PALETTE[i % PALETTE.length];
      const good = se.points.filter((p) => typeof p[0] === "number" && typeof p[1] === "number" && (!v.y.log || p[1] > 0) && (!v.x.log || p[0] > 0));
      if (!good.length) return;
      const d = good.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
      const g = s("g", { "data-series": se.name });
      g.appendChild(s("path", { d, fill: "none", stroke: color, "stroke-width": se.width || 1.5, "stroke-dasharray": se.dash ? "6 4" : null }));
      if (good.length <= 64) good.forEach((p) => g.appendChild(s("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: color },
        s("title", {}, `${se.name}: ${bytesAxis ? bytes(p[0]) : num(p[0])} → ${num(p[1], 4)}`))));
      svg.appendChild(g);
    });
    const legend = h("div", { class: "legend side" }, v.series.map((se, i) => h("span", { "data-series": se.name },
      h("span", { class: "swatch" + (se.dash ? " dashed" : ""), style: se.dash ? `border-color:${PALETTE[i % PALETTE.length]}`
        : `background:${PALETTE[i % PALETTE.length]}` }), se.name)));
    wrap.appendChild(h("div", { class: "plot" }, svg, legend));
    return wrap;
  }
  function scale(lo, hi, a, b, log, base2) {
    if (log) {
      lo = Math.max(lo, 1e-12); hi = Math.max(hi, lo * 1.0001);
      const l0 = Math.log10(lo), l1 = Math.log10(hi);
      const pad = (l1 - l0) * 0.05 || 0.5;
      const from = l0 - pad, to = l1 + pad;
      const f = (v) => a + ((Math.log10(Math.max(v, 1e-12)) - from) / (to - from)) * (b - a);
      const ticks = [];
      const span = to - from;
      if (base2) {                      // sizes: powers of two
        const step = Math.max(1, Math.ceil((span / Math.log10(2)) / 7));
        for (let e = Math.ceil(from / Math.log10(2)); e * Math.log10(2) <= to; e += step) ticks.push(Math.pow(2, e));
      } else {                          // 1, 2, 5 x 10^k when the axis spans few decades
        const mults = span < 2.5 ? [1, 2, 5] : [1];
        const step = Math.max(1, Math.ceil(span / 7));
        for (let e = Math.floor(from); e <= Math.ceil(to); e += step)
          for (const m of mults) { const t = m * Math.pow(10, e); if (Math.log10(t) >= from && Math.log10(t) <= to) ticks.push(t); }
      }
      f.ticks = ticks;
      return f;
    }
    if (hi === lo) { hi = lo + 1; }
    const pad = (hi - lo) * 0.05;
    const from = lo - pad, to = hi + pad;
    const f = (v) => a + ((v - from) / (to - from)) * (b - a);
    const raw = (to - from) / 6, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw) || raw;
    f.ticks = [];
    for (let t = Math.ceil(from / step) * step; t <= to; t += step) f.ticks.push(Number(t.toPrecision(10)));
    return f;
  }

  Object.assign(window.labctlPage, { workloads });
})();
