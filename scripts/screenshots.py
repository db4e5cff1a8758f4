"""The docs' screenshots of the run's page, from real labs: docs/img/report-<kind>-<width>.png
for the default lab, a hang, the bench, the links matrix and a killed node, at 1400 and
1000 px (issue 53 item 8).

    .venv/bin/python scripts/screenshots.py               # run the five labs, check, shoot
    .venv/bin/python scripts/screenshots.py --runs DIR    # ... keeping their run folders in DIR/<kind>
    .venv/bin/python scripts/screenshots.py --reuse DIR   # shoot the run folders DIR/<kind> made before

Every page is checked before it is shot, as tests/test_html_report.py checks it
(tests/html_support.py LAYOUT_JS: nothing cut off, no word broken, at each width): a page
that fails is not shot, the script names what failed and exits 1. The links lab runs on
docker compose (its links are shaped with tc): without a Docker engine (tests/docker_support.py's
rule; a docker client newer than the engine needs the DOCKER_API_VERSION that
scripts/ensure-docker.sh prints) its shots are left as they are, and the script says so. Headless Chromium as the tests drive it (Debian's
chromium through Playwright: scripts/ensure-browser.sh).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from docker_support import docker_available as docker_missing  # noqa: E402  (the tests' rule)
from html_support import KILLED_INSIDE, browser, browser_missing, layout_problems, open_page  # noqa: E402

WIDTHS = (1400, 1000)
HEIGHT = 1150                       # px of the page shown, from the kind's first element
IMG = REPO / "docs" / "img"
# kind -> (labctl's arguments, the element the shot starts at: None for the page's top)
KINDS: dict[str, tuple[list[str], str | None]] = {
    "default": (["up"], None),
    "hang": (["up", "--script", "examples/hang.py", "--on-hang", "stop"], None),
    "bench": (["up", "--workload", "bench"], "#data-bench"),
    "links": (["up", "--backend", "compose", "--nodes", "3", "--link", "2=100mbit", "--workload", "links"],
              "#data-links"),
    "kill-node": (["up", "--script", "{killed}", "--fault", "kill-node:1@2", "--fault-clock", "join",
                   "--pg-timeout", "10"], None),
}


def run_lab(kind: str, out: Path, scratch: Path) -> None:
    """The kind's lab into `out` (its outcome is the page's subject: a hang fails)."""
    args = [a.replace("{killed}", str(scratch / "killed.py")) for a in KINDS[kind][0]]
    (scratch / "killed.py").write_text(KILLED_INSIDE)
    print(f"{kind}: labctl {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "labctl.cli", *args, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    if not (out / "report.html").is_file():
        raise SystemExit(f"{kind}: no report.html (exit {done.returncode}):\n{done.stderr[-3000:]}")


def shoot(b, kind: str, run: Path) -> list[str]:
    """The kind's page at each width, checked, then shot; what failed, one line each."""
    failed = []
    start = KINDS[kind][1]
    for width in WIDTHS:
        page = open_page(b, run, width=width, height=HEIGHT)
        problems = layout_problems(page) + [f"console: {e}" for e in page.console_errors]
        if problems:
            failed += [f"{kind} at {width} px: {p}" for p in problems]
            continue
        top = page.page.locator(start).bounding_box()["y"] - 8 if start else 0
        page.js("window.scrollTo(0, 0)")
        full = page.js("document.documentElement.scrollHeight")
        target = IMG / f"report-{kind}-{width}.png"
        page.page.screenshot(path=str(target), full_page=True,
                             clip={"x": 0, "y": top, "width": width, "height": min(HEIGHT, full - top)})
        print(f"wrote {target.relative_to(REPO)}")
        page.page.close()
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--runs", type=Path, help="keep the labs' run folders here (DIR/<kind>)")
    where.add_argument("--reuse", type=Path, help="shoot the run folders DIR/<kind> made before")
    parser.add_argument("kinds", nargs="*", help=f"only these, of {', '.join(KINDS)} (default: all)")
    args = parser.parse_args()
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        print(f"error: no kind {unknown[0]!r}; the kinds: {', '.join(KINDS)}", file=sys.stderr)
        return 2
    missing = browser_missing()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    kinds = args.kinds or list(KINDS)
    if "links" in kinds and not args.reuse and docker_missing():
        print(f"note: links: {docker_missing()}; its shots are left as they are", file=sys.stderr)
        kinds.remove("links")
    scratch = Path(tempfile.mkdtemp(prefix="labctl-shots-"))
    root = args.reuse or args.runs or scratch
    IMG.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    try:
        with browser() as b:
            for kind in kinds:
                run = root / kind
                if args.reuse:                   # the page again, by this checkout's labctl/html
                    subprocess.run([sys.executable, "-m", "labctl.cli", "report", str(run), "--format", "html"],
                                   cwd=REPO, check=True, capture_output=True, timeout=300)
                else:
                    if run.exists() and (run / "status.json").is_file():
                        shutil.rmtree(run)          # this script's run folder of before
                    run_lab(kind, run, scratch)
                failed += shoot(b, kind, run)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
