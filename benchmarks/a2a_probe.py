"""Probe (a lab script): what each call of all_to_all and broadcast costs, and what TCP
and the shaper did during it, on every rank.

Run as the lab's script on a shaped compose lab, e.g.

    labctl up --backend compose --nodes 4 --nproc-per-node 1 --link 100mbit \
        --script benchmarks/a2a_probe.py -- --iters 10

Every rank prints one line per (op, size): `A2APROBE {json}` with the time of each call
(barrier, call, this rank's wall time from its own call; `--late-ms X`: the last rank
enters each call X ms after the others) and, summed over the calls, the deltas of this
container's TCP counters (/proc/net/snmp Tcp RetransSegs, /proc/net/netstat TcpExt
TCPTimeouts, TCPLossProbes, TCPLostRetransmit, TCPSackRecovery, TCPFastRetrans) and of
its qdiscs' drop counters (`tc -s qdisc`, readable without a capability: eth0 egress and
the ifb lab-in, i.e. ingress), and the congestion control in force.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time

import torch
import torch.distributed as dist

NETSTAT_KEYS = ("TCPTimeouts", "TCPLossProbes", "TCPLostRetransmit", "TCPSackRecovery", "TCPFastRetrans",
                "TCPSpuriousRTOs", "TCPLossProbeRecovery")


def _pairs(path: str, prefix: str) -> dict[str, int]:
    lines = [line.split() for line in open(path) if line.startswith(prefix)]
    out = {}
    for head, values in zip(lines[0::2], lines[1::2]):
        out.update({k: int(v) for k, v in zip(head[1:], values[1:])})
    return out


def drops() -> dict[str, int]:
    """Packets each qdisc dropped (root and leaves summed per device)."""
    out = {}
    for dev in ("eth0", "lab-in"):
        try:
            text = subprocess.run(["tc", "-s", "qdisc", "show", "dev", dev], capture_output=True,
                                  text=True, timeout=5).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        out[dev] = sum(int(m) for m in re.findall(r"dropped (\d+)", text))
    return out


def counters() -> dict[str, int]:
    snmp = _pairs("/proc/net/snmp", "Tcp:")
    ext = _pairs("/proc/net/netstat", "TcpExt:")
    got = {"RetransSegs": snmp.get("RetransSegs", 0), "OutSegs": snmp.get("OutSegs", 0)}
    got.update({k: ext.get(k, 0) for k in NETSTAT_KEYS})
    got.update({f"drop_{k}": v for k, v in drops().items()})
    return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--sizes", default="1048576,4194304")
    parser.add_argument("--ops", default="all_to_all,broadcast")
    parser.add_argument("--late-ms", type=float, default=0.0,
                        help="the last rank sleeps this long after each barrier before it calls: "
                             "it enters the call late (gloo's pair then sends one way first)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    try:
        cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    except OSError:
        cc = "?"
    for op in args.ops.split(","):
        for size in [int(s) for s in args.sizes.split(",")]:
            count = size // 4 // n * n
            x = torch.ones(count)
            y = torch.empty(count)

            def call():
                if op == "all_to_all":
                    dist.all_to_all_single(y, x)
                elif op == "broadcast":
                    dist.broadcast(x, 0)
                elif op == "all_gather":
                    dist.all_gather_into_tensor(y, x[: count // n])
                else:
                    raise SystemExit(f"unknown op {op}")
            call()                                   # warm-up
            dist.barrier()
            before = counters()
            times = []
            for _ in range(args.iters):
                dist.barrier()
                if args.late_ms and rank == n - 1:
                    time.sleep(args.late_ms / 1e3)
                t = time.perf_counter()
                call()
                times.append(round((time.perf_counter() - t) * 1e3, 1))
            dist.barrier()
            after = counters()
            delta = {k: after[k] - before.get(k, 0) for k in after}
            print("A2APROBE " + json.dumps({"rank": rank, "n": n, "op": op, "size": size, "cc": cc,
                                            "ms": times, **delta}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
