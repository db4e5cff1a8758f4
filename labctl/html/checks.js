/* The run page's last sections: the checks the workloads recorded, and the run folder's
 * logs and files. */
(function () {
  "use strict";
  const { D, h, bytes, section, table } = window.labctlPage;

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

  Object.assign(window.labctlPage, { checksSection, logsSection });
})();
