"""The store workload's plugin: the agent store facts and the store latency.

Torch-free: labctl imports it; the measurements themselves are in workloads/store.py.
"""
from __future__ import annotations

import statistics

from workloads._protocol.plugin import Heading, Table, Workload


def views(results: list[dict]) -> list:
    """The agent store facts and the store latency. Pure."""
    mine = [r for r in results if r.get("workload") == "store"]
    facts = sorted((r for r in mine if r.get("name") == "agent-store"),
                   key=lambda r: (r.get("replica", 0), r.get("rank", -1)))
    lat = [r for r in mine if str(r.get("name", "")).startswith("latency-") and not r.get("skipped")]
    if not facts and not lat:
        return []
    parts: list = [Heading("store", 3)]
    if facts:
        rows = [[r.get("replica", ""), r.get("rank"), r.get("launcher"), r.get("init_method"),
                 r.get("TORCHELASTIC_USE_AGENT_STORE"), r.get("TORCHELASTIC_RESTART_COUNT"),
                 r.get("store_type"), r.get("key_layout"), r.get("attempt_prefix") or "none"]
                for r in facts]
        parts.append(Table("the agent store", ("replica", "rank", "launcher", "init", "USE_AGENT_STORE",
                                                "restart", "store", "default group's keys",
                                                "/worker/attempt_<n> prefix"), rows, id="store-agent"))
    if lat:
        by_op: dict[str, list[dict]] = {}
        for r in lat:
            by_op.setdefault(r["name"][len("latency-"):], []).append(r)
        rows = [[op, len(rs), rs[0].get("count"), f"{statistics.median(r['time_us_median'] for r in rs):.1f}",
                 f"{max(r['time_us_p99'] for r in rs):.1f}"] for op, rs in by_op.items()]
        parts.append(Table("store latency", ("op", "ranks", "calls/rank", "median us (median of ranks)",
                                             "p99 us (worst rank)"), rows, id="store-latency"))
    return parts


WORKLOAD = Workload("store", views=views)
