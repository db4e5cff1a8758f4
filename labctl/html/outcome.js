/* The top of the run page: how the run ended (its facts, the first failure, the live
 * diagnosis, what is missing from the folder) and where every rank ran (the topology). */
(function () {
  "use strict";
  const { D, h, section, breakable, when, codeLines } = window.labctlPage;

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

  Object.assign(window.labctlPage, { outcome, topology });
})();
