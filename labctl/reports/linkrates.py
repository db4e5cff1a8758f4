"""The lab's links as the replay takes them (workloads/_protocol/replay.py `Network`):
bytes per second and seconds, between every two nodes. One reading for both predicts
(bench's, benchpredict.py; the patterns', patterns.py)."""
from __future__ import annotations

from workloads._protocol.links import Links


def pair_caps(links: Links | None, nodes: int) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """(a pair's own rate in bytes/s, a path's one-way latency in s) for every a -> b of
    `nodes` nodes that the links give one; none without links."""
    pair: dict[tuple[int, int], float] = {}
    latency: dict[tuple[int, int], float] = {}
    for a in range(nodes):
        for b in range(nodes):
            if a == b or links is None:
                continue
            rule = links.pair(a, b).rate_bps
            if rule:
                pair[(a, b)] = rule / 8
            delay = links.path(a, b).latency_us
            if delay:
                latency[(a, b)] = delay * 1e-6
    return pair, latency
