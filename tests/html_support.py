"""Helpers for the run page's tests and benchmark: a real headless Chromium, and run
folders made by hand (a synthetic big trace; damaged folders).

The browser rule is Docker's (docker_support.py): Debian's `chromium`, driven by
Playwright (`executable_path`, no browser download), installed by
scripts/ensure-browser.sh (`make test` runs it). Where none can be had the browser
tests skip with the reason, except under CI=true, where that is a failure.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = os.environ.get("LABCTL_CHROMIUM", "/usr/bin/chromium")


@functools.lru_cache(maxsize=None)
def browser_missing() -> str | None:
    """None when Playwright and a chromium binary are there; else why not, with the fix."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]'; then bash scripts/ensure-browser.sh)"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (install it with: bash scripts/ensure-browser.sh)"
    return None


def require_browser() -> None:
    reason = browser_missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
        pytest.skip(reason)


class Page:
    """One loaded report.html: what the page said on its console, the requests it made."""

    def __init__(self, page, url: str):
        self.page, self.url = page, url
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))

    def load(self, timeout_ms: float = 60_000) -> "Page":
        self.page.goto(self.url)
        self.wait_until("window.labctlReport && window.labctlReport.ready === true",
                        timeout_s=timeout_ms / 1000)
        return self

    def wait_until(self, expression: str, arg: Any = None, timeout_s: float = 60) -> Any:
        """Until `expression` (or `arg => ...`) is truthy in the page, looked at every 20 ms
        from here. Not Playwright's wait_for_function: past its first look it evaluates the
        string with eval inside the page, which the page's own CSP (no 'unsafe-eval')
        refuses, so a page not ready at once failed the test (seen in CI)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.page.evaluate(expression, arg)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true in the page after {timeout_s:.0f} s: {expression}")
            self.page.wait_for_timeout(20)

    def js(self, expression: str, arg: Any = None) -> Any:
        return self.page.evaluate(expression, arg)

    @property
    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind == "error"] + self.errors

    @property
    def network(self) -> list[str]:
        """Every request but the page's own file."""
        return [u for u in self.requests if u != self.url]


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium (Debian's, no sandbox: tests run as root in containers)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


def open_page(b, run: Path, width: int = 1300, height: int = 900) -> Page:
    page = b.new_page(viewport={"width": width, "height": height})
    return Page(page, (Path(run) / "report.html").resolve().as_uri()).load()


# What a person sees cut off or broken on the page at its width (issue 53 item 8), as one
# line each: the page wider than its window; an element that clips or scrolls what it
# holds sideways (its scrollWidth past its clientWidth); an element that sticks out of the
# page's column; an SVG label out of its picture; a word (a run of letters and digits)
# broken over two lines; a timeline tick label past the canvas's edge. The details of a
# closed <details> are not looked at (they are not drawn).
LAYOUT_JS = r"""() => {
  const out = [];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : '');
  const where = (el) => { const sec = el.closest('section'); return name(el) + (sec ? ' in #' + sec.id : ''); };
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) out.push(`the page is ${root.scrollWidth} px wide in a ${root.clientWidth} px window`);
  const main = document.querySelector('main');
  const box = main.getBoundingClientRect(), pad = parseFloat(getComputedStyle(main).paddingRight) || 0;
  const right = box.right - pad + 1;
  const shown = (el) => !el.closest('details:not([open]) > :not(summary)') && el.getClientRects().length > 0;
  for (const el of main.querySelectorAll('*')) {
    if (!shown(el)) continue;
    const cs = getComputedStyle(el);
    if (cs.overflowX !== 'visible' && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'CANVAS')
      out.push(`${where(el)} holds ${el.scrollWidth} px in ${el.clientWidth} px: cut off`);
    const r = el.getBoundingClientRect(), up = el.parentElement.getBoundingClientRect();
    if (r.width > 0 && r.right > right && !el.closest('svg') && !(up.right > right && el.parentElement !== main))
      out.push(`${where(el)} ends at ${Math.round(r.right)} px, past the page's column (${Math.round(right)} px)`);
  }
  for (const t of main.querySelectorAll('svg text')) {
    if (!shown(t)) continue;
    const b = t.getBoundingClientRect(), s = t.ownerSVGElement.getBoundingClientRect();
    if (b.right > s.right + 1 || b.left < s.left - 1) out.push(`${where(t.ownerSVGElement)}: its label "${t.textContent.slice(0, 40)}" is cut`);
  }
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || !shown(el) || el.closest('svg')) continue;
    for (const m of n.data.matchAll(/[A-Za-z0-9]{2,}/g)) {
      range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter((q) => q.width > 0).map((q) => Math.round(q.top)));
      if (tops.size > 1) out.push(`${where(el)}: the word "${m[0]}" is broken over ${tops.size} lines`);
    }
  }
  const tl = window.labctlReport && window.labctlReport.timeline;
  if (tl) {
    const d = tl.lastDraw();
    for (const t of d.ticks || []) if (t.right > d.width || t.left < 0) out.push(`timeline: its tick label "${t.text}" is cut`);
  }
  return out;
}"""


def layout_problems(page: "Page") -> list[str]:
    """LAYOUT_JS on a loaded page: what is cut off or broken there, one line each."""
    return page.js(LAYOUT_JS)


# A kill-node lab whose fault lands inside a collective: node 1's ranks wait in an
# all_reduce for node 0's, which poll until node 1's processes are gone (the fault) and then
# call it, and get gloo's "Connection closed by peer" (run with --fault kill-node:1@2
# --fault-clock join: tests/test_html_report.py, scripts/screenshots.py).
KILLED_INSIDE = """\
import os, time, torch, torch.distributed as dist


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


dist.init_process_group("gloo")
who = [None] * dist.get_world_size()
dist.all_gather_object(who, (os.getpid(), os.environ["NODE_RANK"]))
t = torch.ones(8)
if os.environ["NODE_RANK"] == "0":          # node 0 comes once node 1 is gone (the fault)
    while any(alive(pid) for pid, node in who if node == "1"):
        time.sleep(0.05)
dist.all_reduce(t)                          # node 1's ranks wait in it when the fault kills them
"""


# ---------------------------------------------------------------- run folders by hand

def write_folder(folder: Path, world: int = 4, nodes: int = 2, state: str = "passed",
                 results: list[dict] | None = None, trace: bool = False, **status: Any) -> Path:
    """The files a run folder holds (status.json, plan.json, spec.yaml, results.jsonl,
    ranks/), as labctl writes them, for `world` ranks on `nodes` nodes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ranks").mkdir(exist_ok=True)
    (folder / "nodes").mkdir(exist_ok=True)
    per = world // nodes
    plan = {"run_id": "lab-synthetic", "backend": "local", "launcher": "torchrun", "world_size": world,
            "master_addr": "127.0.0.1", "master_port": 29500, "replicas": 1,
            "nodes": [{"index": i, "hostname": f"lab-{i}",
                       "env": {"NODE_RANK": str(i), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                               "LAB_INIT_METHOD": "env://"},
                       "argv": ["python", "-m", "torch.distributed.run", "--rdzv-endpoint=127.0.0.1:29500",
                                f"--rdzv-conf=is_host={int(i == 0)}"],
                       "processes": [{"rank": None, "env": {}}]} for i in range(nodes)]}
    (folder / "plan.json").write_text(json.dumps(plan))
    (folder / "spec.yaml").write_text(f"name: lab\nnodes: {nodes}\nnproc_per_node: {per}\ntrace: {str(trace).lower()}\n")
    meta = {"run_id": "lab-synthetic", "lab": "lab", "backend": "local", "launcher": "torchrun",
            "dist_backend": "gloo", "nodes": nodes, "nproc_per_node": per, "world_size": world,
            "state": state, "ok": state == "passed", "started": "2026-11-25T00:00:00+00:00",
            "finished": "2026-11-25T00:01:00+00:00", "seconds": 60.0, "message": "",
            "node_outcomes": [{"index": i, "hostname": f"lab-{i}", "exit_code": 0, "state": "succeeded"}
                              for i in range(nodes)], **status}
    (folder / "status.json").write_text(json.dumps(meta))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results or []))
    for r in range(world):
        (folder / "ranks" / f"rank-{r}.log").write_text("")
    for i in range(nodes):
        (folder / "nodes" / f"node-{i}.log").write_text("")
    return folder


OPS = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "send", "recv")


def synthetic_trace(path: Path, ops: int, world: int = 8, nodes: int = 2, seed: int = 0) -> dict[tuple[int, str], int]:
    """A trace.json as labctl's merge writes it (one event per line: M names, X slices,
    s/f flows), `ops` slices over `world` ranks; returns the slices per (rank, op)."""
    rnd = random.Random(seed)
    per_node = world // nodes
    counts: dict[tuple[int, str], int] = {}
    lines = ['{"traceEvents":[']
    events = []
    for node in range(nodes):
        events.append({"ph": "M", "name": "process_name", "pid": node, "args": {"name": f"node {node} (lab-{node})"}})
        for r in range(node * per_node, (node + 1) * per_node):
            events.append({"ph": "M", "name": "thread_name", "pid": node, "tid": r, "args": {"name": f"rank {r}"}})
    t = [0.0] * world
    seq = 0
    made = 0
    flow = 0
    while made < ops:
        kind = OPS[rnd.randrange(4)] if rnd.random() < 0.85 else "p2p"
        if kind == "p2p":                       # rank a sends to rank b
            a = rnd.randrange(world)
            b = (a + 1) % world
            start = max(t[a], t[b]) + rnd.uniform(1, 20)
            dur = rnd.uniform(5, 60)
            flow += 1
            for rank, op, ts in ((a, "send", start), (b, "recv", start + 2)):
                events.append({"ph": "X", "name": op, "cat": "default_pg", "pid": rank // per_node, "tid": rank,
                               "ts": round(ts, 3), "dur": round(dur, 3),
                               "args": {"rank": rank, "pg": "default_pg", "seq": None, "p2p_seq": flow,
                                        "bytes": 4096, "dtype": "float32", "shape": [1024],
                                        "caller": "train.py:42", "peer": b if op == "send" else a}})
                counts[(rank, op)] = counts.get((rank, op), 0) + 1
                t[rank] = ts + dur
            events.append({"ph": "s", "id": flow, "name": "p2p", "cat": "p2p", "pid": a // per_node, "tid": a,
                           "ts": round(start, 3)})
            events.append({"ph": "f", "bp": "e", "id": flow, "name": "p2p", "cat": "p2p", "pid": b // per_node,
                           "tid": b, "ts": round(start + 2 + dur, 3)})
            made += 2
            continue
        seq += 1
        base = max(t) + rnd.uniform(1, 30)
        for rank in range(world):
            if made >= ops:
                break
            ts = base + rnd.uniform(0, 15)
            dur = rnd.uniform(10, 200)
            events.append({"ph": "X", "name": kind, "cat": "default_pg", "pid": rank // per_node, "tid": rank,
                           "ts": round(ts, 3), "dur": round(dur, 3),
                           "args": {"rank": rank, "pg": "default_pg", "seq": seq, "bytes": 4000,
                                    "dtype": "float32", "shape": [1000], "caller": "train.py:17"}})
            counts[(rank, kind)] = counts.get((rank, kind), 0) + 1
            t[rank] = ts + dur
            made += 1
    lines += [json.dumps(e, separators=(",", ":")) + ("," if i < len(events) - 1 else "")
              for i, e in enumerate(events)]
    lines += ["],", '"displayTimeUnit":"ms",', '"metadata":' + json.dumps({"ops": made, "missing_ranks": []}) + "}"]
    path.write_text("\n".join(lines) + "\n")
    return counts


def synthetic_run(folder: Path, ops: int = 100_000, world: int = 8, nodes: int = 2) -> dict[tuple[int, str], int]:
    """A whole run folder around a synthetic trace of `ops` slices; returns its counts."""
    write_folder(folder, world=world, nodes=nodes, trace=True)
    return synthetic_trace(folder / "trace.json", ops, world, nodes)
