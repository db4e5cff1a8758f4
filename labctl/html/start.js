/* The run page's start-up: every section in the order a reader wants them, the contents
 * bar, what could not be drawn added to the problems box, then data-ready. */
(function () {
  "use strict";
  const { D, app, api, drawErrors, drawn, h, outcome, topology, workloads, timelineSection,
    totalsSection, hangSection, lookedSection, checksSection, logsSection } = window.labctlPage;

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
