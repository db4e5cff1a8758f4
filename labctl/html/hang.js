/* Where the ranks stopped, on the run page: a hang's stuck collectives (who is inside,
 * who never came) and each rank's stack; the stacks of a lab that went on and passed. */
(function () {
  "use strict";
  const { D, h, section, plural, breakable, codeLines } = window.labctlPage;

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

  Object.assign(window.labctlPage, { hangSection, lookedSection });
})();
