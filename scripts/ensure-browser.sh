#!/usr/bin/env bash
# Make a headless browser available for the run page's tests (tests/test_html_report.py);
# idempotent and fast when it is already there.
#
#   1. Debian's `chromium` package, installed with apt only when /usr/bin/chromium is missing
#      (Playwright's own browser download is not used: it needs a host the air-gapped
#      machines cannot reach; Playwright drives this binary through executable_path).
#   2. Playwright (PyPI) in $PYTHON's environment (the dev extra has it; installed here
#      when missing, e.g. in a venv made before it joined the extra).
#   3. A smoke check: the browser starts headless and reads a page.
#
# Env: PYTHON (default .venv/bin/python), LABCTL_CHROMIUM (default /usr/bin/chromium).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
CHROMIUM=${LABCTL_CHROMIUM:-/usr/bin/chromium}

say() { echo "ensure-browser: $*"; }
die() { echo "ensure-browser: error: $*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $* (run as root or install sudo)"; fi; }

if [ ! -x "$CHROMIUM" ]; then
    command -v apt-get >/dev/null || die "no $CHROMIUM and no apt-get; install Chromium and set LABCTL_CHROMIUM to it"
    say "installing chromium with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! as_root apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; then
        as_root apt-get update -q >/dev/null
        as_root apt-get install -y -q --no-install-recommends chromium >/dev/null \
            || die "apt-get install chromium failed"
    fi
fi
[ -x "$CHROMIUM" ] || die "chromium installed but $CHROMIUM is not there; set LABCTL_CHROMIUM"

[ -x "$PYTHON" ] || PYTHON=python3
if ! "$PYTHON" -c "import playwright.sync_api" >/dev/null 2>&1; then
    say "installing playwright from PyPI into $PYTHON's environment"
    "$PYTHON" -m pip install -q playwright || die "pip install playwright failed"
fi

LABCTL_CHROMIUM=$CHROMIUM "$PYTHON" - <<'PY' || die "chromium did not start headless (see above)"
import os
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    b = p.chromium.launch(executable_path=os.environ["LABCTL_CHROMIUM"], args=["--no-sandbox"])
    page = b.new_page()
    page.set_content("<p id=x>ok</p>")
    assert page.inner_text("#x") == "ok"
    b.close()
PY
say "ok: $("$CHROMIUM" --version 2>/dev/null | head -1), playwright $("$PYTHON" -c 'from importlib.metadata import version; print(version("playwright"))')"
