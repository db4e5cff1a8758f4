"""What one compose node shapes on its own interface: the lab's `links:` (labctl/links.py,
the backend-neutral model) as the JSON that `workloads/_shape.py` turns into tc commands
inside the node's container. The compose backend's encoding of the links, so it lives in
its package (the k8s backend encodes them as pod bandwidth annotations instead)."""
from __future__ import annotations

from typing import Any

from ...links import Links

FAIR_MAX_NODES = 64      # up to this many nodes, a shaped node's egress has a class per peer


def _side(rate_bps: int | None, latency_us: int | None) -> dict[str, int]:
    return {k: v for k, v in (("rate_bps", rate_bps), ("latency_us", latency_us)) if v}


def node_shaping(links: Links, index: int, hostnames: list[str] | tuple[str, ...],
                 resolve_timeout: float = 120.0) -> dict[str, Any] | None:
    """What node `index` shapes on its own interface (`workloads/_shape.py` reads it), or
    None when nothing: its cable both ways (its rate; its latency added each way), and per
    peer with a pair rule a class of min(its rate, the pair's) whose outgoing side also
    carries the pair's latency (once per direction: the peer's outgoing side adds it the
    other way). Peers are named by hostname: their addresses are known only at start.

    `fair`: on a lab of up to FAIR_MAX_NODES nodes, the other peers of a node whose egress
    is shaped, each of which gets a class of its own there so that the node's rate is
    shared per peer, as a host's per-flow queue shares it (workloads/_shape.py,
    `fair_share`). Above that the render would grow as nodes², so they share one FIFO."""
    own = links.node(index)
    mine = sorted(b if a == index else a for a, b in links.pairs if index in (a, b))
    if own.empty and not mine:
        return None
    peers = []
    for peer in mine:                  # only this node's pair rules: a render stays O(rules)
        pair = links.pair(index, peer)
        rates = [r for r in (own.rate_bps, pair.rate_bps) if r is not None]
        rate = min(rates) if rates else None
        out_delay = (own.latency_us or 0) + (pair.latency_us or 0)
        peers.append({"node": peer, "host": hostnames[peer],
                      "egress": _side(rate, out_delay or None),
                      "ingress": _side(rate, own.latency_us)})
    fair = []
    if own.rate_bps is not None and len(hostnames) <= FAIR_MAX_NODES:
        fair = [{"node": peer, "host": hostnames[peer]} for peer in range(len(hostnames))
                if peer != index and peer not in mine]
    return {"node": index, "egress": _side(own.rate_bps, own.latency_us),
            "ingress": _side(own.rate_bps, own.latency_us), "peers": peers, "fair": fair,
            "resolve_timeout": resolve_timeout}
