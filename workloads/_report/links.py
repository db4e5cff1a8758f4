"""The links workload's plugin: the pair matrix as a heat map, slow pairs and nodes.

Torch-free: labctl imports it; the records come from workloads/links.py (`pair`,
one per direction, recorded by its sender; `links_env` from rank 0). The verdict
(which pairs and nodes are slow) is workloads/_linkmath.py's. The configured
links (LAB_LINKS, the lab's `links:`) are put beside what was measured.
"""
from __future__ import annotations

import json
from typing import Any

from workloads._linkmath import Verdict, round_count, verdict

from workloads._protocol import links as linkmod
from workloads._protocol.plugin import MD, PAGE, Csv, Heading, Matrix, Table, Text, Workload
from workloads._protocol.results import MAX_TOTAL_NODES

NAME = "links"
SHADES = "▁▂▃▄▅▆▇█"
MATRIX_FIELDS = ("src_node", "dst_node", "p2p_Bps", "tcp_Bps", "one_way_us", "configured_Bps",
                 "bytes", "iters", "src_rank", "dst_rank")


def check_options(options: dict, defaults: dict) -> None:
    merged = {**defaults, **options}
    for key in ("size_bytes", "max_iters", "latency_iters", "tcp_bytes"):
        if merged[key] < 1:
            raise ValueError(f"{key}: expected an integer >= 1, given {merged[key]!r}")
    for key in ("seconds", "tcp_seconds"):
        if not merged[key] > 0:
            raise ValueError(f"{key}: expected a number of seconds > 0, given {merged[key]!r}")
    if not 0 < merged["slow_fraction"] < 1:
        raise ValueError(f"slow_fraction: expected a number between 0 and 1 (a pair slower than "
                         f"this fraction of a typical node's best pair is slow; default 0.5), "
                         f"given {merged['slow_fraction']!r}")


def _mine(results: list[dict], name: str) -> list[dict]:
    return [r for r in results if r.get("workload") == NAME and r.get("name") == name]


def environment(results: list[dict]) -> dict[str, Any]:
    """The links_env record, when its nodes are a lab's (at most MAX_TOTAL_NODES, keyed by
    node number): the tables loop over them twice, and a record may say anything."""
    envs = sorted(_mine(results, "links_env"), key=lambda r: r.get("rank", 0))
    env = envs[0] if envs else {}
    nodes = env.get("nodes")
    if nodes is not None and not (isinstance(nodes, dict) and len(nodes) <= MAX_TOTAL_NODES and all(
            isinstance(k, str) and k.isdigit() and int(k) < MAX_TOTAL_NODES and isinstance(v, dict)
            for k, v in nodes.items())):
        return {}
    return env


def configured(env: dict[str, Any]) -> linkmod.Links | None:
    """The lab's `links:` as the nodes were given them (LAB_LINKS), or None."""
    raw, nodes = env.get("links"), env.get("nodes") or {}
    if not raw or not nodes:
        return None
    try:     # node keys count over replicas: any node of the largest lab is one
        return linkmod.parse(json.loads(raw), MAX_TOTAL_NODES)
    except (ValueError, TypeError):
        return None


def directions(results: list[dict]) -> list[dict]:
    """One row per measured direction (src -> dst), with the configured rate when known."""
    env = environment(results)
    links = configured(env)
    rows = []
    for r in sorted(_mine(results, "pair"), key=lambda r: (r.get("src_node"), r.get("dst_node"))):
        row = {f: r.get(f) for f in MATRIX_FIELDS}
        rate = links.path(r["src_node"], r["dst_node"]).rate_bps if links else None
        row["configured_Bps"] = rate / 8 if rate else None
        row["tcp_error"] = r.get("tcp_error")
        rows.append(row)
    return rows


def analysis(results: list[dict]) -> Verdict:
    env = environment(results)
    speeds = {(r["src_node"], r["dst_node"]): r["p2p_Bps"] for r in directions(results)
              if r.get("p2p_Bps")}
    return verdict(speeds, float(env.get("slow_fraction") or 0.5))


def _mbit(Bps: float | None) -> str:
    """bytes/s as Mbit/s, the unit links are configured in: 3 significant digits, no exponent."""
    if Bps is None:
        return ""
    mbit = Bps * 8 / 1e6
    return f"{mbit:,.0f}" if mbit >= 100 else f"{mbit:.3g}"


def _shade(value: float, top: float) -> str:
    if not top:
        return ""
    return SHADES[min(len(SHADES) - 1, max(0, int(len(SHADES) * value / top - 1e-9)))]


def cost_for(nodes: int, round_seconds: list[float]) -> float | None:
    """Seconds the matrix of `nodes` nodes takes at this run's slowest round."""
    return round(round_count(nodes) * max(round_seconds), 1) if round_seconds else None


def _direction_row(r: dict, result: Verdict) -> list:
    pair = (min(r["src_node"], r["dst_node"]), max(r["src_node"], r["dst_node"]))
    share = (f"{100 * r['p2p_Bps'] / r['configured_Bps']:.0f} %"
             if r.get("configured_Bps") and r.get("p2p_Bps") else "")
    return [r["src_node"], r["dst_node"], _mbit(r["p2p_Bps"]),
            _mbit(r["tcp_Bps"]) or (r.get("tcp_error") or ""),
            f"{r['one_way_us']:.1f}" if r.get("one_way_us") is not None else "",
            _mbit(r["configured_Bps"]), share, "slow" if pair in result.slow_pairs else ""]


def verdict_text(result: Verdict, links: linkmod.Links | None) -> str:
    if result.reference_Bps is None:
        return "One pair only: nothing to compare it with, so no pair is named slow."
    head = (f"Reference: {_mbit(result.reference_Bps)} Mbit/s, the median of each node's best pair; "
            f"slow: below {result.fraction:g} x that ({_mbit(result.threshold_Bps)} Mbit/s).")
    if not result.slow_pairs:
        return head + " **No slow pair.**"
    text = head + " **Slow pairs: " + ", ".join(f"{a}-{b}" for a, b in result.slow_pairs) + ".**"
    for node in result.slow_nodes:
        shaped = links.node(node) if links is not None else None
        why = (f" (its link is configured at {linkmod.human(shaped)})"
               if shaped is not None and not shaped.empty else "")
        text += f" **Node {node} is slow**: every pair it is in is slow{why}."
    return text


def views(results: list[dict]) -> list:
    """The configured topology, the pair matrix (on the page a heat map with the slow pairs
    ringed; in report.md a table shaded ▁..█), every direction, the verdict naming the slow
    pairs and nodes, and (report.md) how long the schedule took."""
    rows = directions(results)
    env = environment(results)
    if not rows and not env:
        return []
    links = configured(env)
    nodes = sorted(int(n) for n in (env.get("nodes") or {}))
    views: list = [Heading("Links: every node pair (torch.distributed p2p; raw TCP beside)")]
    if links is not None:
        views.append(Table(
            "Topology: the configured links", ["node", "host", "its link (both directions)"],
            [[n, (env["nodes"][str(n)] or {}).get("host"), linkmod.human(links.node(n))] for n in nodes],
            "Each node hangs off one switch by its own link; a pair rule limits the traffic between "
            "two nodes only (docs/network.md).", id="links-topology", level=3))
        if links.pairs:
            views.append(Table("Pair rules", ["pair", "pair rule"], [
                [f"{a}-{b}", linkmod.human(link)] for (a, b), link in sorted(links.pairs.items())],
                id="links-pairs"))
    if not rows:
        views.append(Text("No pair was measured (one node: nothing to pair with).", id="links-verdict"))
        return views
    result = analysis(results)
    by = {(r["src_node"], r["dst_node"]): r for r in rows}
    top = max((r["p2p_Bps"] or 0) for r in rows)
    slow = {p for pair in result.slow_pairs for p in (pair, pair[::-1])}
    cells = [[None if a == b or (a, b) not in by else by[(a, b)]["p2p_Bps"] for b in nodes] for a in nodes]
    texts = [["—" if a == b else _mbit(by[(a, b)]["p2p_Bps"]) if (a, b) in by else "" for b in nodes]
             for a in nodes]
    views.append(Matrix(
        "links-matrix", "Bandwidth matrix, Mbit/s (row: sender, column: receiver)",
        [f"node {n}" for n in nodes], cells, texts,
        "Each cell is torch.distributed p2p from the row's node to the column's, shaded by its share "
        "of the fastest pair; a slow pair is ringed.",
        marked=[[i, j] for i, a in enumerate(nodes) for j, b in enumerate(nodes) if (a, b) in slow],
        show=PAGE))
    views.append(Table(
        f"Bandwidth matrix, Mbit/s (row: sender, column: receiver; {SHADES[0]}..{SHADES[-1]}: share of "
        "the fastest)", ["from \\ to", *(f"node {n}" for n in nodes)],
        [[f"node {a}", *("—" if a == b else
                         (f"{_mbit(by[(a, b)]['p2p_Bps'])} {_shade(by[(a, b)]['p2p_Bps'], top)}"
                          if (a, b) in by else "") for b in nodes)] for a in nodes],
        show=MD, level=3))
    views.append(Table(
        "Every direction", ["from", "to", "p2p (Mbit/s)", "TCP (Mbit/s)", "one-way latency (us)",
                            "configured (Mbit/s)", "p2p / configured", "slow"],
        [_direction_row(r, result) for r in rows], id="links-directions", level=3))
    views.append(Text(verdict_text(result, links), id="links-verdict"))
    rounds, seconds = env.get("rounds") or [], env.get("round_seconds") or []
    if rounds:
        views.append(Text(
            f"Schedule: {len(rounds)} round(s) of disjoint pairs in parallel "
            f"(round-robin; {len(nodes)} nodes); rounds took " + ", ".join(f"{s:.2f}" for s in seconds)
            + " s. At this run's slowest round, 16 nodes (15 rounds of 8 pairs) take about "
            f"{cost_for(16, seconds)} s; 64 nodes (63 rounds) about {cost_for(64, seconds)} s.",
            id="links-schedule", show=MD))
    return views


def as_json(results: list[dict]) -> dict[str, Any]:
    env = environment(results)
    result = analysis(results)
    links = configured(env)
    seconds = env.get("round_seconds") or []
    return {
        "nodes": env.get("nodes"),
        "configured": ({"nodes": {str(n): linkmod.human(links.node(n)) for n in
                                  sorted(int(k) for k in env.get("nodes") or {})},
                        "pairs": {f"{a}-{b}": linkmod.human(v) for (a, b), v in links.pairs.items()},
                        "lab": json.loads(env["links"])} if links is not None else None),
        "directions": directions(results),
        "reference_Bps": result.reference_Bps,
        "threshold_Bps": result.threshold_Bps,
        "slow_fraction": result.fraction,
        "slow_pairs": [list(p) for p in result.slow_pairs],
        "slow_nodes": list(result.slow_nodes),
        "rounds": env.get("rounds"),
        "round_seconds": seconds,
        "seconds_at_16_nodes": cost_for(16, seconds),
    }


def table(results: list[dict]) -> Csv:
    """Every direction, one row each: `labctl report --format csv`."""
    fields = [*MATRIX_FIELDS, "tcp_error"]
    return Csv(fields, [[row.get(f) for f in fields] for row in directions(results)])



WORKLOAD = Workload(NAME, views=views, data=as_json, csv=table, check_options=check_options)
