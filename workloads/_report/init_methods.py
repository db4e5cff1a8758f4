"""The init_methods workload's plugin: method, what it needs, worked, join seconds.

Torch-free: labctl imports it; the joins themselves are in workloads/init_methods.py.
"""
from __future__ import annotations

from typing import Any

from workloads._protocol.plugin import Table, Workload
from workloads.init_methods import METHODS, NEEDS


def views(results: list[dict]) -> list:
    """The comparison table, one row per method tried. Pure."""
    mine = [r for r in results if r.get("workload") == "init_methods"
            and str(r.get("name", "")).startswith("join-")]
    if not mine:
        return []
    rows: list[list[Any]] = []
    for method in METHODS:
        rs = [r for r in mine if r["name"] == f"join-{method}"]
        if not rs:
            continue
        if all(r.get("skipped") for r in rs):
            rows.append([f"{method}://", NEEDS[method], f"skipped: {rs[0].get('reason')}", ""])
            continue
        ran = [r for r in rs if not r.get("skipped")]
        seconds = [r["seconds"] for r in ran if isinstance(r.get("seconds"), (int, float))]
        worked = "yes" if all(r.get("ok") for r in ran) else \
            f"no ({sum(1 for r in ran if not r.get('ok'))} of {len(ran)} ranks failed)"
        rows.append([f"{method}://", NEEDS[method], worked,
                     f"{max(seconds):.3f} (slowest of {len(seconds)})" if seconds else ""])
    return [Table("init methods", ("method", "what it needs", "worked", "join seconds"), rows,
                  id="init-methods", level=3)]


WORKLOAD = Workload("init_methods", views=views)
