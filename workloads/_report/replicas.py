"""The replicas workload's plugin: one row per replica.

Torch-free: labctl imports it; the checks themselves are in workloads/replicas.py.
"""
from __future__ import annotations

from typing import Any

from workloads._protocol import WORKLOAD_DONE

from workloads._protocol.plugin import Heading, Table, Text, Workload


def views(results: list[dict]) -> list:
    """One row per replica: its ranks, the cross-replica join, and its checks. Pure."""
    mine = [r for r in results if r.get("workload") == "replicas" and r.get("name") != WORKLOAD_DONE]
    if not mine:
        return []
    if all(r.get("skipped") for r in mine):
        return [Heading("replicas", 3), Text(f"skipped: {mine[0].get('reason')}", id="replicas-skipped")]
    rows: list[list[Any]] = []
    for replica in sorted({r.get("replica", 0) for r in mine}):
        rs = [r for r in mine if r.get("replica", 0) == replica]
        joins = [r["seconds"] for r in rs if r.get("name") == "cross-replica-join" and "seconds" in r]
        checks = [r for r in rs if r.get("name") != "cross-replica-join" and not r.get("skipped")]
        failed = sorted({r["name"] for r in checks if not r.get("ok")})
        rows.append([replica, len({r.get("rank") for r in rs}),
                     f"{max(joins):.3f}" if joins else "",
                     f"{sum(1 for r in checks if r.get('ok'))}/{len(checks)}",
                     ", ".join(failed) or "none"])
    return [Table("replicas", ("replica", "ranks", "cross-replica join s (slowest)", "checks passed",
                               "failed"), rows, id="replicas", level=3)]


WORKLOAD = Workload("replicas", views=views)
