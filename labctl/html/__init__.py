"""report.html: one self-contained page per run that shows the communication itself.

    data.page_data(run folder) -> dict      everything the page shows (the JSON island)
    timeline.read(trace.json) -> Timeline   Chrome trace events as the page's columns
    page.render(dict) -> str                the page: frame, style, script, data inline
    write(run folder) -> Path               all three, into <run>/report.html

Written at every finalize (labctl/lab.py write_report), by `labctl report RUN --format
html` and `labctl collect`; docs/report.md says what it shows and how it is tested.
"""
from __future__ import annotations

from pathlib import Path

from ..atomicfile import atomic_open
from .data import page_data
from .page import PAGE_FILE, render

__all__ = ["page_data", "render", "write", "PAGE_FILE"]


def write(run_path: str | Path, data: dict | None = None) -> Path:
    """<run>/report.html from what the run folder holds now (or `data`, its page_data),
    written whole under a temporary name, then renamed."""
    run_path = Path(run_path)
    target = run_path / PAGE_FILE
    text = render(page_data(run_path) if data is None else data)
    with atomic_open(target, "w", encoding="utf-8") as f:
        f.write(text)
    return target
