"""The page itself: one HTML file, its CSS, script and data inline, nothing fetched.

`render(data)` puts the JSON island (`<script type="application/json" id="run-data">`)
and the page's own script and style (SCRIPTS and report.css beside this module) into
frame.html. The page's Content-Security-Policy allows no request at all, so
it works the same from file:// on an air-gapped machine as attached to a mail.
"""
from __future__ import annotations

import html
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from ..rundir import PAGE_FILE  # noqa: F401  (the page's name: the run folder's, known to the report too)

ASSETS = Path(__file__).parent
# in this order: each file takes the names of those before it (window.labctlPage), start.js
# draws the page; views.js, first, adds the view kinds the workloads' views ask it for
SCRIPTS = ("views.js", "common.js", "outcome.js", "hang.js", "workload_views.js", "timeline.js",
           "checks.js", "start.js")
_SLOT = re.compile(r"\{\{(title|style|data|script)\}\}")


@cache
def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def island(data: dict[str, Any]) -> str:
    """The data as JSON that cannot end its <script> element early: every `<`, `>` and
    `&` is written as a \\u escape (JSON.parse reads them back as they were)."""
    text = json.dumps(data, separators=(",", ":"), default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
               .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render(data: dict[str, Any]) -> str:
    run = data.get("run") or {}
    title = f"Lab {run.get('lab') or '?'}: {str(run.get('state') or '?').upper()} — labctl"
    parts = {"title": html.escape(title), "style": _asset("report.css"),
             "data": island(_finite(data)), "script": "\n".join(_asset(name) for name in SCRIPTS)}
    # one pass over the frame: text inside the data is never taken for a placeholder
    return _SLOT.sub(lambda m: parts[m.group(1)], _asset("frame.html"))


def _finite(value: Any) -> Any:
    """NaN and infinities are not JSON: a loss that blew up is shown as a string."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
