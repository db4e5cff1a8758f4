"""The run page (report.html, labctl/html): its size and how soon it is interactive.

For the default lab (a real `labctl up`, 2 nodes x 2 processes) and a synthetic run of
100,000 traced ops (8 ranks on 2 nodes, tests/html_support.py `synthetic_run`):

- page MB: report.html's size (the target: under 20 MB);
- write s: `labctl.html.write` (page_data + render) in this process;
- ready ms: in headless Chromium (Debian's, through Playwright), from navigation start to
  the "labctl-ready" mark the page's script sets once every section is drawn (median of
  `--loads` fresh pages; the target: 3 s for 100,000 ops);
- zoom ms: one mouse-wheel zoom over the timeline, from the wheel event to the redrawn
  frame (the range changed and the frame drawn); draw ms: that frame's own drawing time.

    python benchmarks/html_report.py                 # both rows
    python benchmarks/html_report.py --ops 300000    # a bigger synthetic run
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, labctl, table  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
import html_support  # noqa: E402

from labctl import html  # noqa: E402


def measure(run: Path, loads: int) -> dict:
    started = time.perf_counter()
    page = html.write(run)
    write_s = time.perf_counter() - started
    ready, zoom, draw = [], [], []
    with html_support.browser() as b:
        for _ in range(loads):
            p = html_support.open_page(b, run)
            ready.append(p.js("performance.getEntriesByName('labctl-ready')[0].startTime"))
            if p.js("!!window.labctlReport.timeline"):
                box = p.page.locator("#timeline-canvas").bounding_box()
                p.page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 60)
                before = p.js("window.labctlReport.timeline.visibleRange()")
                t0 = p.js("performance.now()")
                p.page.mouse.wheel(0, -400)
                p.page.wait_for_function("r => { const v = window.labctlReport.timeline.visibleRange();"
                                         " return v[0] !== r[0] || v[1] !== r[1]; }", arg=before)
                p.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                zoom.append(p.js("performance.now()") - t0)
                draw.append(p.js("window.labctlReport.timeline.lastDraw().ms"))
            assert not p.console_errors and not p.network, (p.console_errors, p.network)
            p.page.close()
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return {"MB": page.stat().st_size / 1e6, "write_s": write_s, "ready_ms": med(ready),
            "zoom_ms": med(zoom), "draw_ms": med(draw)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--skip-lab", action="store_true", help="only the synthetic run")
    args = ap.parse_args()
    reason = html_support.browser_missing()
    if reason:
        sys.exit(f"error: {reason}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="html-bench-") as tmp:
        tmp = Path(tmp)
        if not args.skip_lab:
            done, seconds = labctl("up", "-q", "--out", str(tmp / "default"))
            if done.returncode != 0:
                sys.exit(f"error: the default lab failed: {done.stderr.strip()[-500:]}")
            rows.append(("default lab (2 x 2)", "—", measure(tmp / "default", args.loads)))
        html_support.synthetic_run(tmp / "big", args.ops)
        rows.append((f"synthetic trace, 8 ranks", f"{args.ops:,}", measure(tmp / "big", args.loads)))
    fmt = lambda v, d: "" if v is None else f"{v:.{d}f}"  # noqa: E731
    print(table(("run", "ops", "page MB", "write s", "ready ms (median)", "zoom ms", "draw ms"),
                [(name, ops, fmt(m["MB"], 2), fmt(m["write_s"], 2), fmt(m["ready_ms"], 0),
                  fmt(m["zoom_ms"], 0), fmt(m["draw_ms"], 1)) for name, ops, m in rows]))


if __name__ == "__main__":
    main()
