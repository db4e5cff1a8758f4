"""The env workload's plugin: where every rank runs (its rank variables, host, device, pid).

Torch-free: labctl imports it; the records come from workloads/env.py.
"""
from __future__ import annotations

from workloads._protocol.plugin import Heading, Table, Workload

COLUMNS = ("rank", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
           "hostname", "MASTER_ADDR", "MASTER_PORT", "backend", "device", "pid")


def rank_rows(results: list[dict]) -> list[dict]:
    """One record per rank, by rank: `labctl report --format json`'s "ranks"."""
    rows = [r for r in results if r.get("workload") == "env" and r.get("name") == "env"]
    return sorted(rows, key=lambda r: r.get("rank", -1))


def head(results: list[dict]) -> list:
    """The report's first table (before the checks per workload): one row per rank."""
    rows = rank_rows(results)
    if not rows:
        return []
    return [Heading("Where every rank runs (workload env)"),
            Table("Where every rank runs", COLUMNS, [[r.get(c) for c in COLUMNS] for r in rows], id="env-ranks")]


WORKLOAD = Workload("env", head=head, rank_rows=rank_rows)
