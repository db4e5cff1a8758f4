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


def human_bytes(n: float) -> str:
    """A byte count as people read it: 512 B, 4.0 KiB, 1.5 MiB, 2.0 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
