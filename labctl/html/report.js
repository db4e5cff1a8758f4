/* labctl's run page: draws every section from the JSON island (id "run-data") and
 * nothing else. No library, no request: SVG for charts and figures, a canvas for the
 * timeline. window.labctlReport is the page's API (tests drive it; so may a person in
 * the console). docs/report.md describes the island's shape. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("run-data").textContent);
  const app = document.getElementById("app");
  const api = (window.labctlReport = { data: D, ready: false });
  const SVGNS = "http://www.w3.org/2000/svg";
  const MAX_ARROWS = 400;
  const MAX_CANVAS_PX = 30000;     // the timeline canvas's height at most (browsers refuse taller ones)          // send → recv arrows are drawn when at most this many are in view
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d", "#499894", "#f1ce63", "#a0cbe8", "#bab0ac"];

  // ------------------------------------------------------------------ helpers
  // What could not be drawn (data the page did not expect): named in the problems box,
  // the rest of the page drawn all the same.
  const drawErrors = [];
  function drawn(id, title, build) {
    try {
      return build();
    } catch (err) {
      drawErrors.push(`the section "${title}" could not be drawn: ${err}`);
      return h("section", { id }, h("h2", { text: title }),
        h("p", { class: "bad draw-error", text: `This section could not be drawn: ${err}` }));
    }
  }
  function h(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, kids);
    return node;
  }
  function s(tag, attrs, ...kids) {
    const node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    append(node, kids);
    return node;
  }
  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
  }
  function append(node, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.appendChild(typeof kid === "string" || typeof kid === "number" ? document.createTextNode(String(kid)) : kid);
    }
  }
  function num(v, digits) {
    if (typeof v !== "number") return v === null || v === undefined ? "" : String(v);
    if (Number.isInteger(v)) return String(v);
    return String(Number(v.toPrecision(digits || 6)));
  }
  function bytes(n) {
    if (typeof n !== "number") return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : (Number.isInteger(n) ? String(n) : n.toFixed(1))) + " " + units[i];
  }
  function ms(us) {
    if (typeof us !== "number") return "";
    const a = Math.abs(us);
    if (a >= 1e6) return (us / 1e6).toFixed(3) + " s";
    if (a >= 1e3) return (us / 1e3).toFixed(3) + " ms";
    return us.toFixed(a >= 10 ? 1 : 3) + " µs";
  }
  function section(id, title, ...kids) {
    return h("section", { id }, h("h2", { text: title }), ...kids);
  }
  function table(columns, rows, opts) {
    opts = opts || {};
    return h("table", { id: opts.id, class: opts.cls },
      // a column's name may break after '_' (LOCAL_WORLD_SIZE), a cell after '/' (a path)
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, breakable(c, /(?<=[_\/])/))))),
      h("tbody", {}, rows.map((row, i) => {
        const tr = h("tr", opts.rowAttrs ? opts.rowAttrs(row, i) : {},
          row.map((cell) => cell instanceof Node ? h("td", {}, cell)
            : typeof cell === "number" ? h("td", { class: "num", text: num(cell) })
            : h("td", {}, breakable(cell === null || cell === undefined ? "" : String(cell)))));
        return tr;
      })));
  }
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  // A path or a long token as text with a break opportunity (<wbr>) after each '/': a
  // narrow box wraps it between its parts, never inside a word.
  function breakable(text, after) {
    const parts = String(text === null || text === undefined ? "" : text).split(after || /(?<=\/)/);
    return parts.flatMap((p, i) => (i ? [h("wbr", {}), p] : [p]));
  }
  // An ISO time as one reads it: 2026-11-29 13:51:54 UTC.
  function when(iso) {
    const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)?$/.exec(String(iso || ""));
    if (!m) return String(iso);
    return `${m[1]} ${m[2]}` + (!m[3] ? "" : m[3] === "Z" || m[3] === "+00:00" ? " UTC" : ` ${m[3]}`);
  }
  // Lines of code (a traceback, a stack): one block per line, a wrapped line indented under
  // its start; the lab's own frames, folded by page_data into "… N lab frames", in grey.
  const FOLDED = /^\s*… \d+ lab frames?$/;
  function codeLines(pre, lines, mark) {
    for (const line of lines) {
      const top = !/^\s/.test(line);
      const cls = "ln" + (top ? " top" : "") + (FOLDED.test(line) ? " fold" : "") + (mark && mark(line) ? " own" : "");
      pre.appendChild(h("span", { class: cls, title: FOLDED.test(line) ? "the lab's own frames (its script runner and recorder): the whole stack is in the run folder" : null },
        breakable(line.replace(/^\s+/, "")), "\n"));
    }
    return pre;
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

  const colorOf = (() => {
    const names = new Map();
    return (name) => {
      if (!names.has(name)) names.set(name, PALETTE[names.size % PALETTE.length]);
      return names.get(name);
    };
  })();

  // ------------------------------------------------------------------ 1. outcome
  function outcome() {
    const r = D.run || {};
    const state = String(r.state || "?");
    const nowrap = (v) => (v === null || v === undefined || v === "" ? null : h("span", { class: "nowrap", text: String(v) }));
    const facts = [
      ["run", nowrap(r.run_id)], ["backend", r.backend], ["launcher", r.launcher], ["dist backend", r.dist_backend],
      ["layout", r.nodes !== undefined ? `${r.nodes} node(s) × ${r.nproc_per_node} process(es) = world ${r.world_size}` : null],
      ["replicas", r.replicas > 1 ? r.replicas : null], ["init", nowrap(r.init_method)],
      ["script", r.script ? breakable([r.script.path, ...r.script.args].join(" ")) : null],
      ["workloads", !r.script && r.workloads && r.workloads.length ? r.workloads.join(", ") : null],
      ["traced", r.trace ? "yes (trace.json)" : "no"],
      ["started", r.started ? nowrap(when(r.started)) : null],
      ["took", typeof r.seconds === "number" ? r.seconds.toFixed(1) + " s" : null],
      ["checks", checksFact(r.checks)],
      ["folder", r.path ? breakable(r.path) : null],
    ].filter(([, v]) => v !== null && v !== undefined && v !== "");
    const out = h("section", { id: "outcome" },
      h("h1", {}, `Lab ${r.lab || "?"}`, h("span", { class: `badge ${state}`, id: "state", text: state.toUpperCase() }),
        r.recorded_state ? h("span", { class: "muted", text: `(recorded: ${r.recorded_state})` }) : null),
      r.message ? h("p", { class: "message", text: r.message }) : null,
      h("dl", { class: "facts" }, facts.map(([k, v]) => h("div", { "data-fact": k }, h("dt", { text: k }),
        h("dd", {}, typeof v === "object" ? v : String(v))))));
    if (D.failure) out.appendChild(failureBox(D.failure));
    if (D.live) out.appendChild(liveBox(D.live));
    if (D.problems && D.problems.length) {
      out.appendChild(h("div", { class: "problems", id: "problems" },
        h("b", { text: "What is missing or damaged in this run folder (the rest of the page is drawn from what is there):" }),
        h("ul", {}, D.problems.map((p) => h("li", { text: p })))));
    }
    if (D.notes && D.notes.length) out.appendChild(h("ul", { class: "muted" }, D.notes.map((n) => h("li", { text: "note: " + n }))));
    return out;
  }
  // The checks the Checks table below counts (status.json's, which counts the same records).
  function checksFact(c) {
    if (!c) return null;
    if (!c.total) return "none recorded";
    return `${c.total} recorded: ${c.total - c.failed - c.skipped} passed, ${c.failed} failed, ${c.skipped} skipped`;
  }
  function liveBox(l) {
    // what the live watcher said while the lab hung, and what the finish made of it
    const then = l.resumed_at ? ` (the ranks moved again ${Math.round(l.resumed_at - l.since)} s after it began)`
      : l.verdict ? ` (${l.verdict === "confirmed" ? "confirmed by the final diagnosis" : "the final diagnosis " + l.verdict})`
      : " (the lab still runs)";
    return h("div", { class: "failure live", id: "live-diagnosis" },
      h("div", { class: "what" }, `Live diagnosis, ${Number(l.after_s).toFixed(1)} s after the hang began: `, l.text || ""),
      h("p", { class: "muted", text: (l.reason || "") + then }));
  }
  function failureBox(f) {
    const box = h("div", { class: "failure", id: "first-failure" },
      h("div", { class: "what wrap" }, "First failure: ", breakable(f.text || "")));
    const err = f.error || f.peer_error;
    if (err && err.exception) {
      box.appendChild(h("p", {}, "root cause: ", h("code", {}, breakable(err.exception)),
        err.file ? [" at ", h("span", { class: "wrap" }, breakable(`${err.file}:${err.line}`)), err.function ? ` in ${err.function}` : ""] : ""));
    }
    if (f.code) box.appendChild(h("pre", { class: "code", text: f.code }));
    if (f.quote && f.quote.length) {
      box.appendChild(h("p", { class: "muted" }, `rank ${f.quote_rank}'s traceback (from `, breakable(f.log), "):"));
      box.appendChild(codeLines(h("pre", { class: "quote", id: "failure-quote" }), f.quote));
    } else if (f.log) {
      box.appendChild(h("p", { class: "muted" }, "log: ", breakable(f.log)));
    }
    return box;
  }

  // ------------------------------------------------------------------ 2. topology
  function topology() {
    const t = D.topology;
    const sec = section("topology", "Where every rank runs");
    if (!t || !t.nodes || !t.nodes.length) {
      sec.appendChild(h("p", { class: "muted", text: "No launch plan in this run folder: the layout is unknown." }));
      return sec;
    }
    sec.appendChild(h("p", { class: "caption", text:
      "Each node is one launcher (torchrun agent, or the direct launcher's workers) with its own hostname; " +
      "the ranks in it, with RANK and LOCAL_RANK as the launcher set them; the store every node of a " +
      "replica meets at to form the process group." + (t.rank_source ? ` Ranks from: ${t.rank_source}.` : "") }));
    const byIndex = new Map(t.nodes.map((n) => [n.index, n]));
    for (const rep of t.replicas) {
      const box = h("div", { class: "replica", "data-replica": rep.id });
      if (t.replicas.length > 1) box.appendChild(h("div", { class: "title", text: `replica ${rep.id}` }));
      box.appendChild(h("div", { class: "store", id: `store-${rep.id}` },
        h("b", { text: "store " }), h("code", { text: rep.store || "?" }),
        h("div", { class: "muted", text: `${rep.store_kind || "store"} node ${rep.store_node}` })));
      box.appendChild(h("div", { class: "bus" }));
      box.appendChild(h("div", { class: "nodes" }, rep.nodes.map((i) => nodeBox(byIndex.get(i)))));
      sec.appendChild(box);
    }
    if (t.replica_store) sec.appendChild(h("p", {}, "replicas share the store ", h("code", { text: t.replica_store }),
      t.services && t.services.length ? ` (service ${t.services.join(", ")})` : ""));
    return sec;
  }
  function nodeBox(n) {
    if (!n) return null;
    const bad = ["failed", "killed", "lost"].includes(n.state);
    const state = n.state ? n.state + (n.signal ? ` by ${n.signal}` : "") + (n.exit_code ? `, exit ${n.exit_code}` : "") : "";
    return h("div", { class: "node" + (bad ? " bad" : ""), "data-node": n.index },
      h("div", { class: "head" }, h("span", { text: `node ${n.index} · ${n.hostname || "?"}` }),
        h("span", { class: bad ? "bad" : "muted", text: state })),
      n.hosts.length ? h("div", { class: "sub", text: `host ${n.hosts.join(", ")}` }) : null,
      n.addresses.length ? h("div", { class: "sub", text: `address ${n.addresses.join(", ")}` }) : null,
      n.reason ? h("div", { class: "sub", text: n.reason }) : null,
      h("div", { class: "ranks" }, n.ranks.map((r) => h("div", {
        class: "rank" + (r.failed || (r.exit_code !== null && r.exit_code !== undefined && r.exit_code !== 0) ? " bad" : "") + (r.first_failure ? " first" : ""),
        "data-rank": r.rank,
        title: [r.master ? `MASTER ${r.master}` : null, r.device ? `device ${r.device}` : null].filter(Boolean).join(" · "),
      }, h("b", { text: `RANK ${r.rank}` }),
        `LOCAL_RANK ${r.local_rank === null || r.local_rank === undefined ? "?" : r.local_rank}`,
        r.pid ? h("div", { class: "muted", text: `pid ${r.pid}` }) : null,
        r.exit_code ? h("div", { class: "bad", text: `exit ${r.exit_code}` }) : null,
        r.silent ? h("div", { class: "muted", text: "no output" }) : null))));
  }

  // ------------------------------------------------------------------ 3. the data: views
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

  // ------------------------------------------------------------------ 4. timeline
  function timelineSection() {
    const T = D.timeline;
    const sec = section("timeline", "Timeline");
    if (!T) {
      sec.appendChild(h("p", { class: "muted", text: (D.run && D.run.trace) ? "The lab was traced but no timeline could be read (see above)."
        : "This run was not traced: run it with --trace (or trace: true) to see every rank's collectives and p2p ops here." }));
      return sec;
    }
    const tl = new Timeline(T);
    api.timeline = tl.api();
    // the ops the per-op totals count, and the calls drawn beside them (new_group, ...)
    const calls = T.calls || 0;
    sec.appendChild(h("p", { class: "caption", text:
      `${plural(T.total - calls, "op")}` + (calls ? ` and ${plural(calls, "call")} (${(T.call_names || []).join(", ")}: no op of a group, drawn, not counted)` : "") +
      ` on ${plural(T.lanes.length, "lane")} (a lane per rank, grouped by node; async ops on a lane of their own)` +
      (T.aggregate ? `; ${T.detailed} drawn one by one, the ${T.aggregate.slices} after them as ${T.aggregate.bins} bins per lane` : "") +
      `. Wheel: zoom at the pointer · drag or shift+wheel: pan · double-click: all · click an op: its fields below. Arrows: send → recv (when ${MAX_ARROWS} or fewer are in view). Hatched: never finished.` }));
    sec.appendChild(h("div", { class: "tl-bar" },
      h("button", { id: "tl-zoom-in", onclick: () => tl.zoom(0.5), text: "zoom in" }),
      h("button", { id: "tl-zoom-out", onclick: () => tl.zoom(2), text: "zoom out" }),
      h("button", { id: "tl-fit", onclick: () => tl.fit(), text: "show all" }),
      h("span", { id: "tl-range", class: "muted" })));
    sec.appendChild(tl.wrap);
    sec.appendChild(h("div", { class: "legend", id: "tl-legend" }, tl.opNames().map((name) =>
      h("span", {}, h("span", { class: "swatch", style: `background:${colorOf(name)}` }), name))));
    sec.appendChild(h("div", { class: "selected", id: "tl-selected" }));
    if (D.stragglers && D.stragglers.length) {
      sec.appendChild(h("h3", { id: "stragglers", text: "Stragglers: per collective, the rank that entered last (worst ten; click a row to see it)" }));
      sec.appendChild(table(["process group", "collective", "op", "last to arrive", "late by"],
        D.stragglers.map((x) => [x.pg, `#${x.seq}`, x.op, `rank ${x.rank}`, ms(x.late_ms * 1000)]),
        { id: "stragglers-table", rowAttrs: (row, i) => ({ class: "linked", "data-straggler": i, onclick: () => tl.showSlices(D.stragglers[i].slices) }) }));
    }
    return sec;
  }

  function totalsSection() {
    if (!D.totals || !D.totals.length) return null;
    return section("totals", "Per-op totals",
      h("p", { class: "caption", text: "From every op of the timeline: how often each op ran per process group, the bytes it moved, the time spent in it summed over ranks (ops that never finished count nothing), and the slowest one (click a row to see it)." }),
      table(["process group", "op", "count", "never finished", "bytes", "total", "slowest", "slowest on"],
        D.totals.map((t) => [t.pg, t.op, t.count, t.unfinished || 0, bytes(t.bytes), ms(t.total_ms * 1000), ms(t.slowest_ms * 1000), t.slowest_rank === null ? "" : `rank ${t.slowest_rank}`]),
        { id: "totals-table", rowAttrs: (row, i) => ({ class: "linked", onclick: () => api.timeline && D.totals[i].slowest_slice !== null && api.timeline.showSlices([D.totals[i].slowest_slice]) }) }));
  }

  class Timeline {
    constructor(T) {
      this.T = T;
      const S = T.slices;
      this.S = S;
      this.n = S.ts.length;
      this.endUs = Math.max(T.end_us || 0, 1);
      this.lanes = T.lanes;
      this.highlight = new Set();
      this.selected = -1;
      // a canvas taller than ~30,000 px is refused by browsers: many lanes get thinner rows
      const rowsNeeded = T.lanes.length * 1.3;
      const rowH = rowsNeeded * 21 > MAX_CANVAS_PX ? Math.max(2, Math.floor(MAX_CANVAS_PX / rowsNeeded) - 1) : 16;
      const rowGap = rowH >= 10 ? 5 : 1, groupH = rowH >= 10 ? 18 : 4, axisH = 26;
      this.rowH = rowH; this.labelW = 150; this.axisH = axisH;
      // per lane: its slices by start, packed into rows (nested or overlapping ops)
      const perLane = this.lanes.map(() => []);
      for (let i = 0; i < this.n; i++) perLane[S.lane[i]].push(i);
      this.end = new Float64Array(this.n);
      for (let i = 0; i < this.n; i++) this.end[i] = S.unfinished[i] ? Math.max(S.ts[i] + S.dur[i], this.endUs) : S.ts[i] + S.dur[i];
      this.layout = [];
      let y = axisH, lastGroup = null;
      for (const id of T.lane_order) {
        const lane = this.lanes[id];
        if (lane.group !== lastGroup) { this.layout.push({ kind: "group", y, text: lane.group }); y += groupH; lastGroup = lane.group; }
        const idx = perLane[id].sort((a, b) => S.ts[a] - S.ts[b]);
        const rowsEnd = [], rows = [];
        for (const i of idx) {
          let r = rowsEnd.findIndex((e) => e <= S.ts[i] + 1e-9);
          if (r < 0) { r = rowsEnd.length < 8 ? rowsEnd.length : 7; if (r === rowsEnd.length) { rowsEnd.push(0); rows.push([]); } }
          rowsEnd[r] = Math.max(rowsEnd[r], this.end[i]);
          rows[r].push(i);
        }
        if (!rows.length) rows.push([]);
        const packed = rows.map((list) => {
          let maxDur = 0;
          const starts = new Float64Array(list.length);
          list.forEach((i, k) => { starts[k] = S.ts[i]; maxDur = Math.max(maxDur, this.end[i] - S.ts[i]); });
          return { ids: Int32Array.from(list), starts, maxDur };
        });
        this.layout.push({ kind: "lane", id, y, rows: packed, h: packed.length * rowH + rowGap, lane });
        y += packed.length * rowH + rowGap;
      }
      this.height = y + 6;
      this.byLaneY = this.layout.filter((l) => l.kind === "lane");
      this.laneMid = new Map(this.byLaneY.map((l) => [l.id, l.y + rowH / 2]));
      this.t0 = 0; this.t1 = this.endUs;
      this.padR = 14;              // px right of the trace's end: its last op is not flush with the edge
      // the page's elements
      this.canvas = h("canvas", { id: "timeline-canvas", tabindex: 0, "aria-label": "timeline: a lane per rank" });
      this.tip = h("div", { class: "tip", id: "tl-tip" });
      this.wrap = h("div", { class: "tl-wrap", id: "timeline-view" }, this.canvas, this.tip);
      this.bind();
    }
    opNames() {
      const names = new Set();
      for (let i = 0; i < this.n; i++) names.add(this.T.strings[this.S.name[i]]);
      if (this.T.aggregate) for (const bins of Object.values(this.T.aggregate.lanes)) for (const b of bins) names.add(this.T.strings[b[2]]);
      return [...names].sort();
    }
    api() {
      const self = this;
      return {
        visibleRange: () => [self.t0, self.t1],
        fullRange: () => [0, self.endUs],
        setRange: (a, b) => self.setRange(a, b),
        zoom: (f, at) => self.zoom(f, at),
        fit: () => self.fit(),
        showSlices: (ids) => self.showSlices(ids),
        slicesInView: () => self.inView(),
        sliceFields: (i) => self.fields(i),
        countsByRankOp: () => self.counts(),
        lanes: () => self.lanes,
        lastDraw: () => ({ ms: self.lastDrawMs, rectangles: self.drawn, ticks: self.ticks, width: self.width }),
        slicePosition: (i) => self.position(i),
        findSlices: (op, rank) => { const out = []; for (let i = 0; i < self.n; i++) if (self.T.strings[self.S.name[i]] === op && (rank === undefined || self.lanes[self.S.lane[i]].rank === rank)) out.push(i); return out; },
      };
    }
    counts() {
      // what the timeline holds, per rank (lanes of one rank together) and op
      const out = {};
      const add = (lane, name, k) => {
        const r = String(this.lanes[lane].rank);
        out[r] = out[r] || {};
        out[r][name] = (out[r][name] || 0) + k;
      };
      for (let i = 0; i < this.n; i++) add(this.S.lane[i], this.T.strings[this.S.name[i]], 1);
      if (this.T.aggregate) {
        // aggregated slices are known by count only: the exact counts per lane and op
        const detailed = {};
        for (let i = 0; i < this.n; i++) { const k = this.S.lane[i] + "\u0000" + this.S.name[i]; detailed[k] = (detailed[k] || 0) + 1; }
        for (const [lane, byOp] of Object.entries(this.T.counts)) for (const [name, k] of Object.entries(byOp)) {
          const sid = this.T.strings.indexOf(name);
          const left = k - (detailed[lane + "\u0000" + sid] || 0);
          if (left > 0) add(Number(lane), name, left);
        }
      }
      return out;
    }
    inView() {
      let k = 0;
      for (let i = 0; i < this.n; i++) if (this.end[i] >= this.t0 && this.S.ts[i] <= this.t1) k++;
      return k;
    }
    fields(i) {
      const S = this.S, str = (j) => (j >= 0 ? this.T.strings[j] : null), lane = this.lanes[S.lane[i]];
      const f = { op: str(S.name[i]), rank: lane.rank, lane: lane.name, node: lane.group, pg: str(S.cat[i]),
        start: ms(S.ts[i]), duration: S.unfinished[i] ? "never finished" : ms(S.dur[i]) };
      if (S.seq[i] >= 0) f.collective = "#" + S.seq[i];
      if (S.p2p[i] >= 0) f.p2p = "#" + S.p2p[i];
      if (S.bytes[i] >= 0) f.bytes = bytes(S.bytes[i]);
      if (S.shape[i] >= 0) f.tensor = str(S.shape[i]);
      if (S.peer[i] >= 0) f.peer = "rank " + S.peer[i];
      if (S.root[i] >= 0) f.root = "rank " + S.root[i];
      if (S.caller[i] >= 0) f.caller = str(S.caller[i]);
      if (S.extra[i] >= 0) f.args = str(S.extra[i]);
      return f;
    }
    position(i) {
      // the middle of slice i's visible part, in the canvas's CSS pixels (null: not in view)
      const item = this.byLaneY.find((l) => l.id === this.S.lane[i]);
      if (!item) return null;
      const r = item.rows.findIndex((row) => Array.prototype.includes.call(row.ids, i));
      const a = Math.max(this.S.ts[i], this.t0), e = Math.min(this.end[i], this.t1);
      if (e < a) return null;
      return { x: (this.X(a) + this.X(e)) / 2, y: item.y + r * this.rowH + this.rowH / 2 };
    }
    X(t) { const w = this.width - this.labelW - this.padR; return this.labelW + ((t - this.t0) / (this.t1 - this.t0)) * w; }
    Tof(x) { const w = this.width - this.labelW - this.padR; return this.t0 + ((x - this.labelW) / w) * (this.t1 - this.t0); }
    setRange(a, b) {
      // clamped to the trace: never wider than all of it, never panned past either end
      // (it zoomed out without end into empty time before)
      const full = this.endUs, minSpan = Math.min(0.5, full);
      if (!isFinite(a) || !isFinite(b)) { a = 0; b = full; }
      let span = Math.min(Math.max(b - a, minSpan), full);
      const c = (a + b) / 2;
      a = Math.min(Math.max(c - span / 2, 0), full - span);
      this.t0 = a; this.t1 = a + span;
      this.schedule();
    }
    zoom(f, at) {
      const c = at === undefined ? (this.t0 + this.t1) / 2 : at;
      this.setRange(c - (c - this.t0) * f, c + (this.t1 - c) * f);
    }
    fit() { this.setRange(0, this.endUs); }
    showSlices(ids) {
      if (!ids || !ids.length) return;
      let a = Infinity, b = -Infinity;
      for (const i of ids) { a = Math.min(a, this.S.ts[i]); b = Math.max(b, this.end[i]); }
      const pad = Math.max((b - a) * 0.15, 5);
      this.highlight = new Set(ids);
      this.select(ids[ids.length - 1]);
      this.setRange(a - pad, b + pad);
      this.wrap.scrollIntoView({ block: "nearest" });
    }
    select(i) {
      this.selected = i;
      const box = document.getElementById("tl-selected");
      if (!box) return;
      box.textContent = "";
      if (i < 0) return;
      const f = this.fields(i);
      box.appendChild(h("b", { text: "selected: " }));
      box.appendChild(document.createTextNode(Object.entries(f).map(([k, v]) => `${k} ${v}`).join(" · ")));
      box.setAttribute("data-slice", i);
    }
    schedule() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.draw(); });
    }
    resize() {
      const dpr = window.devicePixelRatio || 1;
      this.width = Math.max(400, this.wrap.clientWidth || 900);
      this.canvas.width = Math.round(this.width * dpr);
      this.canvas.height = Math.round(this.height * dpr);
      this.canvas.style.height = this.height + "px";
      this.ctx = this.canvas.getContext("2d");
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    }
    draw() {
      const started = performance.now();
      if (!this.ctx || this.width !== Math.max(400, this.wrap.clientWidth || 900)) this.resize();
      const ctx = this.ctx, S = this.S, rowH = this.rowH, W = this.width;
      ctx.clearRect(0, 0, W, this.height);
      ctx.font = "11px system-ui, sans-serif";
      // axis
      const span = this.t1 - this.t0, raw = span / Math.max(2, (W - this.labelW) / 110);
      const mag = Math.pow(10, Math.floor(Math.log10(raw)));
      const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw);
      const tick = tickFormat(step);
      ctx.fillStyle = "#5c6773"; ctx.strokeStyle = "#eef1f4";
      // each tick's label right of its line; one that would run past the canvas's edge
      // is set left of its line instead (the last one was cut: "2.0")
      this.ticks = [];
      let lastEnd = -Infinity;
      for (let t = Math.ceil(this.t0 / step) * step; t <= this.t1 + step * 1e-9; t += step) {
        const x = this.X(t), text = tick(t), w = ctx.measureText(text).width;
        ctx.beginPath(); ctx.moveTo(x + 0.5, this.axisH - 6); ctx.lineTo(x + 0.5, this.height); ctx.stroke();
        let at = x + 3;
        if (at + w > W - 2) at = x - 3 - w;
        if (at < lastEnd + 6 || at < this.labelW) continue;
        ctx.fillText(text, at, 14);
        lastEnd = at + w;
        this.ticks.push({ t, text, left: at, right: at + w });
      }
      // slices, lane by lane, row by row: at most one rectangle per pixel column and op
      let drawn = 0;
      for (const item of this.layout) {
        if (item.kind === "group" && rowH < 10) continue;
        if (item.kind === "group") {
          ctx.fillStyle = "#1d232b"; ctx.font = "600 12px system-ui, sans-serif";
          ctx.fillText(item.text, 6, item.y + 13); ctx.font = "11px system-ui, sans-serif";
          ctx.fillStyle = "#eef1f4"; ctx.fillRect(this.labelW, item.y + 8, W - this.labelW, 1);
          continue;
        }
        ctx.fillStyle = "#5c6773";
        if (rowH >= 10) ctx.fillText(item.lane.name, 14, item.y + 12);
        item.rows.forEach((row, r) => {
          const y = item.y + r * rowH;
          const from = lowerBound(row.starts, this.t0 - row.maxDur);
          let lastPx = -1;
          for (let k = from; k < row.ids.length && row.starts[k] <= this.t1; k++) {
            const i = row.ids[k];
            const e = this.end[i];
            if (e < this.t0) continue;
            const x0 = Math.max(this.X(S.ts[i]), this.labelW), x1 = Math.min(this.X(e), W);
            const name = this.T.strings[S.name[i]], color = colorOf(name);
            const w = x1 - x0;
            if (w < 1) {                 // level of detail: one op per pixel column and row
              const px = Math.floor(x0);
              if (px === lastPx) continue;
              lastPx = px;
            }
            ctx.fillStyle = color;
            ctx.fillRect(x0, y + 1, Math.max(w, 1), rowH - 3);
            drawn++;
            if (S.unfinished[i]) hatch(ctx, x0, y + 1, Math.max(w, 1), rowH - 3);
            if (this.highlight.has(i) || i === this.selected) {
              ctx.strokeStyle = "#111"; ctx.lineWidth = 2; ctx.strokeRect(x0, y + 1, Math.max(w, 2), rowH - 3); ctx.lineWidth = 1;
            }
            if (w > 44) {
              ctx.save(); ctx.beginPath(); ctx.rect(x0, y, w, rowH); ctx.clip();
              ctx.fillStyle = "#fff"; ctx.fillText(name, x0 + 3, y + 11); ctx.restore();
            }
          }
        });
        const agg = this.T.aggregate && this.T.aggregate.lanes[String(item.id)];
        if (agg) {
          const bw = this.T.aggregate.bin_us;
          for (const [b, busy, sid] of agg) {
            const a = b * bw, e = a + bw;
            if (e < this.t0 || a > this.t1) continue;
            ctx.globalAlpha = Math.min(1, 0.25 + busy / bw);
            ctx.fillStyle = colorOf(this.T.strings[sid]);
            ctx.fillRect(Math.max(this.X(a), this.labelW), item.y + 1, Math.max(this.X(e) - this.X(a), 1), rowH - 3);
            ctx.globalAlpha = 1;
          }
        }
      }
      // send → recv arrows, when there are few enough in view to read
      const flows = this.T.flows.filter((f) => Math.max(f[1], f[3]) >= this.t0 && Math.min(f[1], f[3]) <= this.t1);
      if (flows.length <= MAX_ARROWS) {
        ctx.strokeStyle = "rgba(29,35,43,.65)"; ctx.fillStyle = "rgba(29,35,43,.8)";
        for (const [la, ta, lb, tb] of flows) {
          const ya = this.laneMid.get(la), yb = this.laneMid.get(lb);
          if (ya === undefined || yb === undefined) continue;
          arrow(ctx, this.X(ta), ya, this.X(tb), yb);
        }
      }
      for (const [lane, t] of this.T.instants) {
        const y = this.laneMid.get(lane);
        if (y === undefined || t < this.t0 || t > this.t1) continue;
        const x = this.X(t);
        ctx.fillStyle = "#1d232b"; ctx.beginPath(); ctx.moveTo(x, y - 6); ctx.lineTo(x + 4, y); ctx.lineTo(x - 4, y); ctx.fill();
      }
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, this.labelW - 2, this.axisH - 6);
      this.drawn = drawn;
      this.lastDrawMs = performance.now() - started;
      const label = document.getElementById("tl-range");
      if (label) label.textContent = (this.t0 <= 0 && this.t1 >= this.endUs ? `showing all ${ms(this.endUs)}`
        : `showing ${ms(this.t0)} – ${ms(this.t1)} of ${ms(this.endUs)}`) + `; ${drawn} rectangles drawn`;
      this.wrap.setAttribute("data-start", this.t0);
      this.wrap.setAttribute("data-end", this.t1);
    }
    hit(x, y) {
      const item = this.byLaneY.find((l) => y >= l.y && y < l.y + l.h);
      if (!item) return -1;
      const r = Math.floor((y - item.y) / this.rowH);
      const row = item.rows[r];
      if (!row) return -1;
      const t = this.Tof(x), slack = ((this.t1 - this.t0) / (this.width - this.labelW)) * 3;
      let best = -1, bestD = Infinity;
      const from = lowerBound(row.starts, t - slack - row.maxDur);
      for (let k = from; k < row.ids.length && row.starts[k] <= t + slack; k++) {
        const i = row.ids[k];
        const a = this.S.ts[i], e = this.end[i];
        const d = t < a ? a - t : t > e ? t - e : 0;
        if (d <= slack && d < bestD) { best = i; bestD = d; }
      }
      return best;
    }
    bind() {
      const c = this.canvas;
      let drag = null;
      c.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const rect = c.getBoundingClientRect();
        const t = this.Tof(ev.clientX - rect.left);
        if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
          const d = (ev.shiftKey ? ev.deltaY : ev.deltaX) / (this.width - this.labelW) * (this.t1 - this.t0);
          this.setRange(this.t0 + d, this.t1 + d);
        } else {
          this.zoom(Math.exp(ev.deltaY * 0.0015), t);
        }
      }, { passive: false });
      c.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0: this.t0, t1: this.t1, moved: false }; c.classList.add("dragging"); });
      window.addEventListener("mouseup", () => { drag = null; c.classList.remove("dragging"); });
      c.addEventListener("mousemove", (ev) => {
        const rect = c.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
        if (drag) {
          const dx = ev.clientX - drag.x;
          if (Math.abs(dx) > 2) drag.moved = true;
          const dt = (dx / (this.width - this.labelW)) * (drag.t1 - drag.t0);
          this.setRange(drag.t0 - dt, drag.t1 - dt);
          this.tip.style.display = "none";
          return;
        }
        const i = this.hit(x, y);
        if (i < 0) { this.tip.style.display = "none"; return; }
        this.tip.textContent = Object.entries(this.fields(i)).map(([k, v]) => `${k}: ${v}`).join("\n");
        this.tip.style.display = "block";
        this.tip.style.left = Math.min(x + 14, this.width - 300) + "px";
        this.tip.style.top = (y + 14) + "px";
      });
      c.addEventListener("mouseleave", () => { this.tip.style.display = "none"; });
      c.addEventListener("click", (ev) => {
        if (drag && drag.moved) return;
        const rect = c.getBoundingClientRect();
        this.select(this.hit(ev.clientX - rect.left, ev.clientY - rect.top));
        this.schedule();
      });
      c.addEventListener("dblclick", () => this.fit());
      c.addEventListener("keydown", (ev) => {
        const k = ev.key.toLowerCase(), span = this.t1 - this.t0;
        if (k === "w") this.zoom(0.7); else if (k === "s") this.zoom(1 / 0.7);
        else if (k === "a") this.setRange(this.t0 - span * 0.2, this.t1 - span * 0.2);
        else if (k === "d") this.setRange(this.t0 + span * 0.2, this.t1 + span * 0.2);
      });
      window.addEventListener("resize", () => this.schedule());
    }
  }
  // A tick's label in the unit its step reads best in, with as many decimals as the step
  // needs: 0 s, 0.5 s, 1 s ... or 0 ms, 200 ms ...
  function tickFormat(step) {
    const [unit, div] = step >= 1e5 ? ["s", 1e6] : step >= 100 ? ["ms", 1e3] : ["µs", 1];
    const digits = Math.max(0, -Math.floor(Math.log10(step / div) + 1e-9));
    return (t) => `${(t / div).toFixed(digits)} ${unit}`;
  }
  function lowerBound(arr, v) {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function hatch(ctx, x, y, w, hgt) {
    ctx.save(); ctx.beginPath(); ctx.rect(x, y, w, hgt); ctx.clip();
    ctx.strokeStyle = "rgba(255,255,255,.7)"; ctx.lineWidth = 2;
    for (let k = x - hgt; k < x + w; k += 7) { ctx.beginPath(); ctx.moveTo(k, y + hgt); ctx.lineTo(k + hgt, y); ctx.stroke(); }
    ctx.restore();
  }
  function arrow(ctx, x1, y1, x2, y2) {
    ctx.beginPath(); ctx.moveTo(x1, y1); ctx.lineTo(x2, y2); ctx.stroke();
    const a = Math.atan2(y2 - y1, x2 - x1);
    ctx.beginPath(); ctx.moveTo(x2, y2);
    ctx.lineTo(x2 - 7 * Math.cos(a - 0.4), y2 - 7 * Math.sin(a - 0.4));
    ctx.lineTo(x2 - 7 * Math.cos(a + 0.4), y2 - 7 * Math.sin(a + 0.4));
    ctx.fill();
  }

  // ------------------------------------------------------------------ 5. a hang
  function hangSection() {
    const g = D.hang;
    if (!g || g.looked) return null;
    const sec = section("hang", "Where the ranks stopped");
    const left = h("div", { class: "hang-left" });
    const c = g.collective;
    if (c && c.stuck && c.stuck.length) {
      left.appendChild(h("p", { class: "caption", text: c.source === "flight recorder"
        ? "From every rank's Flight Recorder ring, dumped when labctl asked (the lab was not traced)."
        : "From the trace records: the furthest collective of each process group, who is inside it, who never came." }));
      for (const st of c.stuck) left.appendChild(stuckBox(st));
    } else if (c && c.text) {
      left.appendChild(h("p", { text: c.text }));
    } else {
      left.appendChild(h("p", { class: "muted", text: "No stuck collective was named (stacks only)." }));
    }
    if (c && c.p2p && c.p2p.length) left.appendChild(h("ul", { id: "stuck-p2p" }, c.p2p.map((p) => h("li", { text: p }))));
    // each rank's stack, when labctl took them (none: no heading over nothing)
    const right = g.stacks && g.stacks.length ? h("div", { class: "hang-right", id: "stacks" },
      h("h3", { text: "Each rank's stack (the main thread first; its innermost frame in your code marked)" }),
      g.stacks.map(stackBox),
      g.more_stacks ? h("p", { class: "muted", text: `... and ${g.more_stacks} more ranks' stacks in stacks/` }) : null) : null;
    sec.appendChild(h("div", { class: "hang-grid" + (right ? "" : " no-stacks") }, left, right));
    return sec;
  }
  // The stacks of a lab that went on and passed: where the ranks were when labctl looked
  // (the live watcher asks when nothing seems to move, as at a slow start), near the end.
  function lookedSection() {
    const g = D.hang;
    if (!g || !g.looked || !g.stacks || !g.stacks.length) return null;
    return section("stacks-looked", "Where the ranks were when labctl looked",
      h("p", { class: "caption", text: "The lab went on and passed: labctl asked every rank for its stack while nothing seemed to move (a slow start, torch still importing), so this is no hang. The stacks are in stacks/." }),
      h("div", { id: "stacks" }, g.stacks.map(stackBox)));
  }
  function stuckBox(st) {
    const last = st.last || {};
    const killed = st.killed || {}, left = st.left || {};
    const waiting = (st.waiting || []).filter((r) => !(String(r) in killed) && !(String(r) in left));
    const labels = {};
    for (const r of waiting) labels[r] = last[r] || "";
    const counts = {};
    Object.values(labels).forEach((l) => { const op = l.split(" ").slice(1).join(" "); counts[op] = (counts[op] || 0) + 1; });
    const common = Object.entries(counts).sort((a, b) => b[1] - a[1])[0];
    const chip = (r, odd, why) => h("span", { class: "rank" + (odd ? " bad first" : ""), "data-rank": r },
      h("b", { text: `rank ${r}` }), last[r] || "none", why ? h("span", { class: "why wrap" }, breakable(why)) : null);
    const box = (cls, role, title, ranks, make) => ranks.length
      ? h("div", { class: cls }, h("div", { class: "muted", text: title }), h("div", { class: "ranks", "data-role": role }, ranks.map(make)))
      : null;
    const ranksOf = (o) => Object.keys(o).map(Number).sort((a, b) => a - b);
    return h("div", { class: "stuck", "data-pg": st.pg, "data-seq": st.seq },
      h("div", {}, h("b", { text: `${st.pg}: collective #${st.seq} (${st.op})` })),
      // a rank killed inside it is not waiting there: it is gone (a kill-node fault's ranks)
      box("killed", "killed", "killed inside it:", ranksOf(killed), (r) => chip(r, true, killed[r])),
      box("inside", "waiting", "inside it, waiting:", waiting, (r) => {
        const op = (labels[r] || "").split(" ").slice(1).join(" ");
        return chip(r, common && op !== common[0]);
      }),
      box("left", "left", ranksOf(left).some((r) => left[r]) ? "entered it and left it with an error:" : "entered it and left it:",
        ranksOf(left), (r) => chip(r, false, left[r])),
      box("outside", "missing", "never entered it (last collective entered):", st.missing || [], (r) => chip(r, true)),
      h("p", { class: (st.mismatch ? "bad " : "") + "wrap" }, breakable(st.text || "")));
  }
  function stackBox(st) {
    const w = st.where || {};
    const main = (st.threads || [])[0];
    const others = (st.threads || []).slice(1);
    const lab = others.filter((t) => t.lab).length;
    const pre = h("pre", {});
    if (main) {
      const own = (line) => w.file && line.includes(`"${w.file}", line ${w.line}`);
      codeLines(pre, [main.name, ...(main.frames.length ? main.frames : ["  (no Python frame: the thread was in C or C++ code)"])], own);
    }
    const threads = h("pre", {});
    others.forEach((t, i) => codeLines(threads, [...(i ? [""] : []), t.name, ...t.frames]));
    return h("div", { class: "stack", "data-rank": st.rank },
      h("div", { class: "head" }, h("b", { text: `rank ${st.rank}` }),
        w.file ? [" at ", h("span", { class: "wrap" }, breakable(`${w.file}:${w.line}`)), ` in ${w.function}`] : " (no frame in your code)",
        w.call ? ` · in torch.distributed.${w.call}` : ""),
      pre,
      others.length ? h("details", {}, h("summary", { text: `${plural(others.length, "other thread")}` +
        (lab ? ` (${lab === others.length ? "all" : lab} the lab's own)` : "") }), threads) : null,
      st.cut ? h("p", { class: "muted", text: "(cut: see stacks/ for the whole dump)" }) : null);
  }

  // ------------------------------------------------------------------ 6. checks, logs
  function checksSection() {
    const c = D.checks;
    if (!c) return null;
    const sec = section("checks", "Checks");
    if (c.per_workload && c.per_workload.length) {
      sec.appendChild(table(["workload", "ranks", "passed", "failed", "skipped", "seconds (slowest rank)"],
        c.per_workload.map((w) => [w.workload, w.ranks, w.passed, w.failed, w.skipped, Number(w.seconds.toFixed(2))]), { id: "checks-table" }));
    } else {
      sec.appendChild(h("p", { class: "muted", text: "No checks recorded (a script of your own records none)." }));
    }
    if (c.failed && c.failed.length) {
      sec.appendChild(h("h3", { text: `Failed checks (${c.failed_total})` }));
      sec.appendChild(table(["workload", "check", "rank", "detail"], c.failed.map((f) => [f.workload, f.name, f.rank, f.detail || ""]), { id: "failed-checks", cls: "bad" }));
    }
    if (c.skipped && c.skipped.length) {
      sec.appendChild(h("h3", { text: "Skipped (not a failure)" }));
      sec.appendChild(table(["workload", "check", "reason", "ranks"], c.skipped.map((x) => [x.workload, x.name, x.reason, x.ranks.join(", ")])));
    }
    return sec;
  }
  function logsSection() {
    const l = D.logs;
    if (!l) return null;
    return section("logs", "Logs and files",
      h("ul", {},
        h("li", {}, "per rank: ", l.ranks.map((r, i) => [i ? ", " : "", h("code", { class: r.bytes === null ? "bad" : null, text: `ranks/rank-${r.rank}.log` + (r.bytes === null ? " (missing)" : ` (${bytes(r.bytes)})`) })])),
        h("li", {}, "per node: ", l.nodes.map((p, i) => [i ? ", " : "", h("code", { text: p.split("/").slice(-2).join("/") })])),
        h("li", {}, "results: ", h("code", { text: l.results }), " · report for terminals: ", h("code", { text: l.report_md }))),
      h("p", { class: "muted", text: `This page was written ${D.generated} by labctl; its data is the JSON in the element #run-data.` }));
  }

  // ------------------------------------------------------------------ the page
  function nav(sections) {
    return h("nav", { class: "toc" }, sections.filter(Boolean).map((sec) =>
      h("a", { href: "#" + sec.id, text: (sec.querySelector("h2, h1") || {}).textContent || sec.id })));
  }
  try {
    // a hang's diagnosis first: it is what a person opening that page came for
    const sections = [drawn("outcome", "Outcome", outcome), drawn("hang", "Where the ranks stopped", hangSection),
      drawn("topology", "Where every rank runs", topology), ...workloads(),
      drawn("timeline", "Timeline", timelineSection), drawn("totals", "Per-op totals", totalsSection),
      drawn("checks", "Checks", checksSection), drawn("stacks-looked", "Where the ranks were when labctl looked", lookedSection),
      drawn("logs", "Logs and files", logsSection)].filter(Boolean);
    if (drawErrors.length) {
      let box = sections[0].querySelector("#problems");
      if (!box) {
        box = h("div", { class: "problems", id: "problems" },
          h("b", { text: "What is missing or damaged in this run folder (the rest of the page is drawn from what is there):" }),
          h("ul", {}));
        sections[0].appendChild(box);
      }
      drawErrors.forEach((e) => box.querySelector("ul").appendChild(h("li", { class: "draw-error", text: e })));
    }
    app.appendChild(sections[0]);
    app.appendChild(nav(sections.slice(1)));
    sections.slice(1).forEach((sec) => app.appendChild(sec));
    document.title = `Lab ${(D.run || {}).lab || "?"}: ${String((D.run || {}).state || "?").toUpperCase()} — labctl`;
    if (api.timeline) {
      try { api.timeline.fit(); } catch (err) { drawErrors.push(`the timeline could not be drawn: ${err}`); }
    }
  } catch (err) {
    app.appendChild(h("pre", { class: "bad", text: "This page could not draw itself: " + err + "\nThe data is in the element #run-data." }));
    throw err;
  }
  requestAnimationFrame(() => requestAnimationFrame(() => {
    api.ready = true;
    document.documentElement.setAttribute("data-ready", "1");
    performance.mark("labctl-ready");
  }));
})();
