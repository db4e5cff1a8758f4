"""Parse what benchmarks/watch_queues.sh sampled in a node: one sample per `@ <ns>` line,
with the node's qdisc backlogs and its TCP connections (`ss -tin`).

Each sample: `t_ms` (Unix time, ms); `fifo`: [egress, ingress] bytes queued, every class's
FIFO of the device added (eth0's htb tree comes first, lab-in's second); `conns`: one dict
per connection, keyed by (local address, local port, peer address, peer port), with `sendq`
and what ss printed of rtt (ms), cwnd (packets), bytes acked/received, pacing and delivery
rate (bit/s), notsent, snd_wnd, rcv_space, rcv_ssthresh, and BBR's `bw` (bit/s), `mrtt`
(ms) and pacing `gain`.
"""
from __future__ import annotations

import re
from pathlib import Path

_FIELDS = ("rtt", "cwnd", "bytes_acked", "bytes_received", "pacing_rate", "delivery_rate", "notsent",
           "snd_wnd", "rcv_space", "rcv_ssthresh")
_CONN = re.compile(r"\d+\s+(\d+)\s+\S*?([\d.]+)\]?:(\d+)\s+\S*?([\d.]+)\]?:(\d+)")
_BBR = re.compile(r"bbr:\(bw:(\d+)bps,mrtt:([\d.]+),pacing_gain:([\d.]+)")


def samples(path: Path) -> list[dict]:
    out: list[dict] = []
    cur: dict | None = None
    qdisc, device, conn = "", -1, None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("@ "):
            cur = {"t_ms": int(line[2:]) / 1e6, "fifo": [0, 0], "conns": {}}
            out.append(cur)
            qdisc, device, conn = "", -1, None
            continue
        if cur is None:
            continue
        if line.startswith("qdisc "):
            qdisc = line.split()[1]
            if line.startswith("qdisc htb 1: root"):          # eth0's tree, then lab-in's
                device += 1
        m = re.match(r"\s*backlog (\d+)b (\d+)p", line)
        if m and qdisc == "bfifo" and 0 <= device <= 1:
            cur["fifo"][device] += int(m.group(1))
        m = _CONN.match(line)
        if m:
            conn = (m.group(2), m.group(3), m.group(4), m.group(5))
            cur["conns"][conn] = {"sendq": int(m.group(1))}
        if line.startswith("\t") and conn is not None:
            c = cur["conns"][conn]
            for k in _FIELDS:
                mm = re.search(rf"\b{k}[: ]([\d.]+)", line)
                if mm:
                    c[k] = float(mm.group(1))
            mm = _BBR.search(line)
            if mm:
                c["bw"], c["mrtt"], c["gain"] = float(mm.group(1)), float(mm.group(2)), float(mm.group(3))
    return out
