"""Read what benchmarks/slow_node_queues.sh sampled against the run's trace.json: per call of
the all_gather, each rank's time; per size, node 3's egress (eth0) and ingress (lab-in)
queue backlog while a call ran, and the TCP state of the connections between nodes 2 and 3
(round trip, window) as each side saw it.

    python benchmarks/slow_node_queues.py FOLDER
"""
import json
import sys
from pathlib import Path

from _queues import samples

D = Path(sys.argv[1])


def conns(sample):
    """A sample's connections as dicts with their addresses in them."""
    return [{"local": k[0], "lport": k[1], "peer": k[2], "pport": k[3], **c} for k, c in sample["conns"].items()]


s3, s2 = samples(D / "s3.txt"), samples(D / "s2.txt")
tr = json.loads((D / "run/trace.json").read_text())
t0 = tr["metadata"]["t0_unix_ns"] / 1e6
ag = [e for e in tr["traceEvents"] if e.get("ph") == "X" and "all_gather" in e["name"] and e["args"].get("bytes") in (262144, 1048576)]
by = {}
for e in ag:
    by.setdefault((e["args"]["seq"], e["args"]["bytes"]), []).append(e)
calls = []
for (seq, nb), es in sorted(by.items()):
    start = t0 + min(e["ts"] for e in es) / 1000; end = t0 + max(e["ts"] + e["dur"] for e in es) / 1000
    calls.append((seq, nb, start, end, {e["args"]["rank"]: round(e["dur"] / 1000, 1) for e in es}))
print("calls (seq, per-rank block bytes, ms per rank):")
for c in calls: print(c[0], c[1], c[4])
# node 3's own IP, and node 2's
ip3 = next(c["local"] for s in s3 for c in conns(s))
ip2 = next(c["local"] for s in s2 for c in conns(s))
print("ip3", ip3, "ip2", ip2)
for nb in (262144, 1048576):
    eg, ing, rtt32 = [], [], []
    for seq, b, st, en, _ in calls:
        if b != nb: continue
        for s in s3:
            if st <= s["t_ms"] <= en:
                eg.append(s["fifo"][0]); ing.append(s["fifo"][1])
                for c in conns(s):
                    if c["peer"] == ip2 and "rtt" in c: rtt32.append((c["rtt"], c.get("cwnd"), c.get("snd_wnd"), c.get("rcv_space"), c.get("rcv_ssthresh")))
    eg.sort(); ing.sort()
    q = lambda xs, p: xs[int(p * (len(xs) - 1))] if xs else None
    print(f"block {nb}: samples {len(eg)}; node3 egress backlog median {q(eg,.5)} p90 {q(eg,.9)} max {eg[-1] if eg else None}; ingress backlog median {q(ing,.5)} p90 {q(ing,.9)} max {ing[-1] if ing else None}")
    print("  node3<->node2 conns (rtt ms, cwnd, snd_wnd, rcv_space, rcv_ssthresh):", sorted(set(rtt32))[:12])
    # node 2's view of its connection to node 3
    v2 = []
    for seq, b, st, en, _ in calls:
        if b != nb: continue
        for s in s2:
            if st <= s["t_ms"] <= en:
                for c in conns(s):
                    if c["peer"] == ip3 and "rtt" in c: v2.append((c["rtt"], c.get("cwnd"), c.get("snd_wnd"), c["sendq"]))
    print("  node2->node3 (rtt ms, cwnd, snd_wnd, send-q):", sorted(v2)[::max(1, len(v2)//12)])
