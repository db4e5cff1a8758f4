"""The env workload's report: where every rank runs (its rank variables, host, device, pid).

Torch-free: labctl imports it; the records come from workloads/env.py.
"""
from __future__ import annotations

from labctl.tables import table

COLUMNS = ("rank", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
           "hostname", "MASTER_ADDR", "MASTER_PORT", "backend", "device", "pid")


def rank_rows(results: list[dict]) -> list[dict]:
    """One record per rank, by rank: `labctl report --format json`'s "ranks"."""
    rows = [r for r in results if r.get("workload") == "env" and r.get("name") == "env"]
    return sorted(rows, key=lambda r: r.get("rank", -1))


def head(results: list[dict]) -> str | None:
    """The report's first table (before the checks per workload): one row per rank."""
    rows = rank_rows(results)
    if not rows:
        return None
    return "\n".join(["## Where every rank runs (workload env)", "",
                      table(COLUMNS, ([r.get(c) for c in COLUMNS] for r in rows))])
