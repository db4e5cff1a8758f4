"""The preflight workload's plugin: one table, node (pair) x check, pass/FAIL and the value.

Torch-free: labctl imports it for the report section and `labctl preflight`'s table
(labctl/reports/preflight.py, which adds the nodes that said nothing); the checks
themselves are in workloads/preflight.py.
"""
from __future__ import annotations

from typing import Any

from workloads._protocol.plugin import Table, Workload

# Node-level checks first (in the order a node meets them), then pairs, then everyone.
ORDER = ("dns", "gpus", "shm", "port", "init_port", "join", "clock", "all_reduce", "p2p")
TO_NODE0 = {"dns", "port", "init_port", "join", "clock"}


def rows(results: list[dict]) -> list[dict[str, Any]]:
    """One row per (check, node, peer): pass only when every rank's record passed."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if r.get("workload") != "preflight" or r.get("name") not in ORDER:
            continue
        node = None if r.get("peer") == "all" else r.get("node")
        groups.setdefault((r["name"], node, r.get("peer")), []).append(r)
    out = []
    for (check, node, peer), records in groups.items():
        failed = [r for r in records if not r.get("ok")]
        shown = failed[0] if failed else max(
            (r for r in records if r.get("value")),
            key=lambda r: r.get("seconds") or 0.0, default=records[0])
        out.append({"nodes": _label(check, node, peer), "check": check, "ok": not failed,
                    "value": (shown.get("detail") or shown.get("value", "")) if failed
                    else shown.get("value", ""), "ranks": sorted(r.get("rank") for r in records),
                    "_key": _order(check, node, peer)})
    out.sort(key=lambda row: row.pop("_key"))
    return out


def _order(check: str, node: Any, peer: Any) -> tuple:
    """Each node's own checks, node by node; then the pairs; then all nodes together."""
    pair = check in ("all_reduce", "p2p") and isinstance(peer, int)
    return (2 if peer == "all" else 1 if pair else 0, node if isinstance(node, int) else -1,
            peer if pair else -1, ORDER.index(check))


def _label(check: str, node: Any, peer: Any) -> str:
    if peer == "all":
        return "all nodes"
    if check in ("all_reduce", "p2p"):
        return f"node {node} <-> node {peer}"
    if check in TO_NODE0 and node != peer and peer is not None:
        return f"node {node} -> node {peer}"
    return f"node {node}"


def views(results: list[dict]) -> list:
    found = rows(results)
    if not found:
        return []
    failed = [r for r in found if not r["ok"]]
    head = (f"{len(failed)} of {len(found)} preflight check(s) failed: "
            + ", ".join(sorted({r['check'] for r in failed})) if failed
            else f"all {len(found)} preflight checks passed")
    return [Table("Preflight (node pair x check)", ("nodes", "check", "result", "value"),
                  [(r["nodes"], r["check"], "pass" if r["ok"] else "FAIL", r["value"]) for r in found],
                  head, id="preflight", level=2)]


def as_json(results: list[dict]) -> dict[str, Any]:
    found = rows(results)
    return {"ok": all(r["ok"] for r in found) and bool(found), "checks": found}


WORKLOAD = Workload("preflight", views=views, data=as_json)
