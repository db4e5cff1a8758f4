/* The run page's shared names, for the files after it (labctl/html/page.py's SCRIPTS) to
 * take from window.labctlPage: the run's data (the JSON island, docs/report.md describes
 * it), the page's API window.labctlReport (tests drive it; so may a person in the console),
 * the element builders, the formats and colours, and drawn(). No library, no request. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("run-data").textContent);
  const app = document.getElementById("app");
  const api = (window.labctlReport = { data: D, ready: false });
  const SVGNS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d", "#499894", "#f1ce63", "#a0cbe8", "#bab0ac"];

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

  const colorOf = (() => {
    const names = new Map();
    return (name) => {
      if (!names.has(name)) names.set(name, PALETTE[names.size % PALETTE.length]);
      return names.get(name);
    };
  })();

  window.labctlPage = { D, app, api, PALETTE, drawErrors, drawn, h, s, num, bytes, ms, section,
    table, plural, breakable, when, codeLines, colorOf };
})();
