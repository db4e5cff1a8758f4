"""Read what benchmarks/root_sockets.sh sampled against the run's trace.json: per broadcast call
of 1 MiB and more, each rank's exit (ms after the first entry), and about 14 samples of the
root's two data connections over the call: bytes acked since the call began, BBR's bandwidth
estimate (Mbit/s), its pacing rate and gain, cwnd (packets), round trip (ms), bytes not yet
sent, and the root's egress backlog (q, bytes in eth0's FIFOs, every class's).

    python benchmarks/root_sockets.py FOLDER
"""
import json
import sys
from pathlib import Path

from _queues import samples

D = Path(sys.argv[1])
s0 = samples(D / "s0.txt")
tr = json.loads((D / "run/trace.json").read_text())
t0 = tr["metadata"]["t0_unix_ns"] / 1e6
ev = [e for e in tr["traceEvents"] if e.get("ph") == "X" and "broadcast" in e["name"]]
by = {}
for e in ev: by.setdefault(e["args"]["seq"], []).append(e)
ip = {}
for s in s0:
    for k, c in s["conns"].items():
        if c.get("bytes_acked", 0) > 1e6: ip.setdefault(k, 1)
print("data conns", list(ip))
for seq, es in sorted(by.items()):
    nb = es[0]["args"].get("bytes")
    st = t0 + min(e["ts"] for e in es) / 1000; en = t0 + max(e["ts"] + e["dur"] for e in es) / 1000
    rk = {e["args"]["rank"]: round((e["ts"] + e["dur"]) / 1000 + t0 - st) for e in es}
    win = [s for s in s0 if st - 5 <= s["t_ms"] <= en + 5]
    if not win: continue
    if not nb or nb < 1 << 20:
        continue
    print(f"\nseq {seq} bytes {nb} exit per rank (ms) {rk} samples {len(win)}")
    base = {k: win[0]["conns"].get(k, {}).get("bytes_acked", 0) for k in ip}
    for s in win[::max(1, len(win)//14)]:
        row = [f"{s['t_ms']-st:7.1f}ms q={s['fifo'][0]:7d}"]
        for k in ip:
            c = s["conns"].get(k, {})
            row.append(f"{k[2]}: acked {(c.get('bytes_acked',0)-base[k])/1e6:5.2f}MB bw {c.get('bw',0)/1e6:5.1f} pace {c.get('pacing_rate',0)/1e6:5.1f} g {c.get('gain',0):.2f} cwnd {c.get('cwnd',0):3.0f} rtt {c.get('rtt',0):5.1f} notsent {c.get('notsent',0)/1e3:6.0f}k")
        print("  ".join(row))
