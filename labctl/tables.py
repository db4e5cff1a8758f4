"""Markdown tables: the one table format of every report (core and workload hooks)."""
from __future__ import annotations

from typing import Any, Iterable


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """A Markdown table; cells are stringified, pipes escaped."""
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        cells = ["" if c is None else str(c).replace("|", "\\|").replace("\n", " ") for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
