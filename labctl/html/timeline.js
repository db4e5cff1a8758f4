/* The run page's timeline (a canvas: a lane per rank, zoom and pan, send → recv arrows,
 * level of detail) and the per-op totals and stragglers tables that point into it. */
(function () {
  "use strict";
  const { D, api, h, bytes, ms, section, table, plural, colorOf } = window.labctlPage;

  const MAX_ARROWS = 400;              // send → recv arrows are drawn when at most this many are in view
  const MAX_CANVAS_PX = 30000;         // the timeline canvas's height at most (browsers refuse taller ones)

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

  Object.assign(window.labctlPage, { timelineSection, totalsSection });
})();
