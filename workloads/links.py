"""Workload `links`: every node pair's bandwidth and latency, through torch.distributed.

One leader per node (its local rank 0) measures, with every other node's leader
and in both directions, over the lab's process group (p2p send/recv, launched by
torchrun like any workload; no MPI):

    latency    one element sent and sent back `latency_iters` times: one-way time =
               the median round trip / 2
    bandwidth  `size_bytes` sent, a one-element answer back; time minus the quickest small
               round trip; repeated until `seconds` (at least once, at most `max_iters`):
               bytes/s = `size_bytes` / the median time
    tcp        (`tcp: true`) the raw TCP figure beside it: a plain socket streamed for
               at most `tcp_seconds` / `tcp_bytes` to the peer's gloo address (_link.py)

Pairs run in parallel rounds (a round-robin tournament: n - 1 rounds of n/2
disjoint pairs, n rounds for an odd n; workloads/_linkmath.py), every rank
waiting at a barrier between rounds; so the matrix costs about (rounds) x (one
pair's time), not n(n-1)/2 pair times.

Nodes are the lab's (NODE_RANK, counted over replicas as the links: rules are),
not torchrun's group ranks. On a node whose link the lab shapes (compose: the
shaping step says so in LAB_LINK_SHAPED), the leader also checks that a rank
cannot change the shaping: no NET_ADMIN in any capability set, and `tc` refused
with "Operation not permitted" (a probe that would change nothing if allowed).

Every leader records one `pair` result per direction it sends; rank 0 records
`links_env` (nodes, rounds, the configured links, options). The report hook
(workloads/_report/links.py) prints the matrix and names slow pairs and nodes.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

from . import _common, _link, _linkmath
from ._protocol import Env
from ._shape import PEER_MINOR, SHAPED_ENV   # SHAPED_ENV: set by the shaping step before it execs the node

NET_ADMIN_BIT = 12          # linux/capability.h: CAP_NET_ADMIN


def lab_node() -> int:
    """The lab's index of this node (as `links:` counts them), not torchrun's group rank."""
    nodes = int(os.environ.get("LAB_NODES") or 1)
    node = int(os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK") or 0)
    return int(os.environ.get("REPLICA_ID") or 0) * nodes + node


def capability_sets() -> dict[str, int]:
    """This process's capability sets (CapInh, CapPrm, CapEff, CapBnd, CapAmb) as integers."""
    sets = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Cap"):
                    key, _, value = line.partition(":")
                    sets[key] = int(value.strip(), 16)
    except OSError:
        pass
    return sets


def probe_tc(device: str = "eth0") -> tuple[bool, str]:
    """(refused, what tc said) for an `add` of a root qdisc that exists already: allowed,
    it would fail with 'Exclusivity flag on' and change nothing; without NET_ADMIN the
    kernel refuses it first (EPERM)."""
    done = subprocess.run(["tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "htb"],
                          capture_output=True, text=True, timeout=30)
    said = (done.stderr.strip().splitlines() or [done.stdout.strip() or "no output"])[-1]
    return done.returncode != 0 and "not permitted" in said.lower(), said


def check_locked(ctx: _common.Context, node: int) -> None:
    """A rank of a shaped node holds no NET_ADMIN and tc refuses it."""
    caps = capability_sets()
    holding = sorted(k for k, v in caps.items() if v >> NET_ADMIN_BIT & 1)
    if shutil.which("tc") is None:
        ctx.skip("shaping_locked", "no tc in this image to try")
        return
    refused, said = probe_tc()
    ok = refused and not holding
    ctx.record("shaping_locked", ok, node=node, tc=said, net_admin_in=holding,
               caps={k: f"{v:016x}" for k, v in caps.items()}, shaped=os.environ.get(SHAPED_ENV),
               **({} if ok else {"detail": f"a rank could change the shaping: tc said {said!r}; "
                                 f"NET_ADMIN in {holding or 'no set'}"}))


def egress_class_bytes(device: str = "eth0") -> dict[str, int]:
    """Bytes each htb class of `device` has sent ({"1:101": ...}); reading needs no
    capability. Empty when tc is missing or says nothing."""
    if shutil.which("tc") is None:
        return {}
    done = subprocess.run(["tc", "-s", "class", "show", "dev", device], capture_output=True,
                          text=True, timeout=30)
    sent, current = {}, None
    for line in done.stdout.splitlines():
        words = line.split()
        if words[:2] == ["class", "htb"] and len(words) > 2:
            current = words[2]
        elif words[:1] == ["Sent"] and current is not None and len(words) > 1 and words[1].isdigit():
            sent[current] = int(words[1])
            current = None
    return sent


def check_shared_per_peer(ctx: _common.Context, node: int, peers: list[int]) -> None:
    """After the pair matrix: on a node whose egress is shared per peer (workloads/_shape.py),
    each peer's data went through that peer's own class (1:<PEER_MINOR + its node, in hex>)."""
    classes = egress_class_bytes()
    per_peer = {str(p): classes.get(f"1:{PEER_MINOR + p:x}") for p in peers}
    ok = bool(classes) and all(v for v in per_peer.values())
    ctx.record("egress_shared_per_peer", ok, node=node, per_peer_bytes=per_peer,
               common_bytes=classes.get("1:10"),
               **({} if ok else {"detail": f"not every peer's data had its own class: {per_peer}"}))


class Pair:
    """The two leaders of one pair, from one side: measure what this side sends."""

    def __init__(self, ctx: _common.Context, peer_rank: int, payload: torch.Tensor):
        self.ctx, self.peer = ctx, peer_rank
        self.small = torch.zeros(1, dtype=torch.float32)
        self.payload = payload
        self.scratch = torch.empty_like(payload)

    # ---- the side that times ------------------------------------------------
    def ping(self, iters: int) -> list[float]:
        times = []
        for _ in range(iters):
            started = time.perf_counter()
            dist.send(self.small, dst=self.peer)
            dist.recv(self.small, src=self.peer)
            times.append(time.perf_counter() - started)
        return times

    def push(self, seconds: float, max_iters: int) -> list[float]:
        """Send the payload until `seconds` (once at least); each time to its answer."""
        times, go, began = [], torch.ones(1), time.perf_counter()
        while True:
            more = len(times) < max_iters and (not times or time.perf_counter() - began < seconds)
            go.fill_(1.0 if more else 0.0)
            dist.send(go, dst=self.peer)
            if not more:
                return times
            started = time.perf_counter()
            dist.send(self.payload, dst=self.peer)
            dist.recv(self.small, src=self.peer)
            times.append(time.perf_counter() - started)

    # ---- the side that answers ------------------------------------------------
    def pong(self, iters: int) -> None:
        for _ in range(iters):
            dist.recv(self.small, src=self.peer)
            dist.send(self.small, dst=self.peer)

    def take(self) -> None:
        go = torch.zeros(1)
        while True:
            dist.recv(go, src=self.peer)
            if go.item() == 0.0:
                return
            dist.recv(self.scratch, src=self.peer)
            dist.send(self.small, dst=self.peer)


def _measure_direction(ctx, pair: Pair, sending: bool, opts: dict, me: int, peer: int,
                       endpoints: dict, sock) -> None:
    """One direction of a pair: latency, bandwidth, then TCP; the sender records it."""
    if not sending:
        pair.pong(opts["latency_iters"])
        pair.take()
        if opts["tcp"] and sock is not None:
            try:
                _link.serve_once(sock, timeout=max(60.0, 10 * opts["tcp_seconds"]))
            except OSError:
                pass
        return
    rtts = pair.ping(opts["latency_iters"])
    rtt = statistics.median(rtts)
    times = pair.push(opts["seconds"], opts["max_iters"])
    # each payload time holds one small round trip (the answer): take the quickest one
    # seen off (noise only adds to it), never more than half the time. On a loaded machine
    # noise only slows a transfer down: the quick end (10th percentile) is what the link
    # carries, the median what this run happened to get.
    data = sorted(max(t - min(rtts), t / 2) for t in times)
    took, typical = data[int(0.1 * (len(data) - 1))], statistics.median(data)
    fields = {"src_node": me, "dst_node": peer, "src_rank": ctx.rank, "dst_rank": pair.peer,
              "one_way_us": round(rtt / 2 * 1e6, 3), "rtt_us_median": round(rtt * 1e6, 3),
              "latency_iters": len(rtts), "bytes": pair.payload.numel() * pair.payload.element_size(),
              "one_way_us_min": round(min(rtts) / 2 * 1e6, 3),
              "iters": len(times), "seconds_p10": round(took, 6), "seconds_median": round(typical, 6)}
    fields["p2p_Bps"] = round(fields["bytes"] / took, 3)
    fields["p2p_Bps_median"] = round(fields["bytes"] / typical, 3)
    address, port, error = endpoints.get(peer, (None, None, "no endpoint"))
    if opts["tcp"]:
        if error is None:
            try:
                got, seconds = _link.send_for(address, port, opts["tcp_bytes"], opts["tcp_seconds"])
                fields.update(tcp_bytes=got, tcp_seconds=round(seconds, 6),
                              tcp_Bps=round(got / seconds, 3) if seconds > 0 else None,
                              address=address)
            except OSError as exc:
                fields["tcp_error"] = f"TCP to {address}:{port} failed: {exc}"
        else:
            fields["tcp_error"] = f"node {peer} could not listen: {error}"
    ctx.record("pair", True, **fields)


def run(ctx: _common.Context, size_bytes: int = 4 << 20, seconds: float = 0.5, max_iters: int = 100,
        latency_iters: int = 20, tcp: bool = True, tcp_seconds: float = 0.5,
        tcp_bytes: int = 256 << 20, slow_fraction: float = 0.5) -> None:
    opts = {"size_bytes": int(size_bytes), "seconds": float(seconds), "max_iters": int(max_iters),
            "latency_iters": int(latency_iters), "tcp": bool(tcp), "tcp_seconds": float(tcp_seconds),
            "tcp_bytes": int(tcp_bytes), "slow_fraction": float(slow_fraction)}
    node = lab_node()
    leader = ctx.local_rank == 0
    sock, address, error = None, None, None
    if leader and opts["tcp"]:
        try:
            address = _link.gloo_address()
            sock = _link.listen(address, backlog=4)
        except (OSError, ValueError) as exc:
            error = str(exc)
    me = [ctx.rank, node, leader, _common.hostname(), address,
          sock.getsockname()[1] if sock else None, error]
    everyone = _common.all_gather_json(me)
    leaders = {n: r for r, n, lead, *_ in everyone if lead}
    hosts = {n: h for _, n, lead, h, *_ in everyone if lead}
    endpoints = {n: (a, p, e) for _, n, lead, _, a, p, e in everyone if lead}
    schedule = _linkmath.rounds(sorted(leaders))
    if leader and os.environ.get(SHAPED_ENV):
        check_locked(ctx, node)
    payload = torch.zeros(max(1, opts["size_bytes"] // 4), dtype=torch.float32)
    round_seconds = []
    try:
        for pairs in schedule:
            started = time.perf_counter()
            mine = next(((a, b) for a, b in pairs if node in (a, b)), None) if leader else None
            if mine is not None:
                peer = mine[1] if mine[0] == node else mine[0]
                pair = Pair(ctx, leaders[peer], payload)
                first = node == mine[0]          # the smaller node sends first
                for sending in ((True, False) if first else (False, True)):
                    _measure_direction(ctx, pair, sending, opts, node, peer, endpoints, sock)
            dist.barrier()
            round_seconds.append(round(time.perf_counter() - started, 6))
    finally:
        if sock is not None:
            sock.close()
    if leader and "shared per peer" in os.environ.get(SHAPED_ENV, ""):
        check_shared_per_peer(ctx, node, sorted(n for n in leaders if n != node))
    if ctx.rank == 0:
        ctx.record("links_env", True, nodes={str(n): {"rank": leaders[n], "host": hosts[n]}
                                             for n in sorted(leaders)},
                   rounds=[[list(p) for p in pairs] for pairs in schedule],
                   round_seconds=round_seconds, links=os.environ.get(Env.LINKS),
                   world_size=ctx.world_size, **opts)


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("links")
