"""Shape this container's link, then run the node as the lab's user with no capability.

`python3 -m workloads._shape --node JSON -- ARGV...` is the first process of a
compose node whose link the lab shapes (labctl/backends/compose/render.py writes it; the
JSON is `labctl.backends.compose.shaping.node_shaping`). It starts as root with NET_ADMIN (and
SETUID, SETGID, SETPCAP to leave root), and:

1. resolves the peers that have a pair rule (their addresses are known only once
   their containers are on the network: it waits, at most `resolve_timeout` s), and
   the other peers when its egress is shared per peer (`fair`; one that does not
   resolve in that time is left in the node's common class);
2. shapes the node's link with tc (docs/network.md): what it sends on `eth0`
   (htb: one class for the node's rate, one per peer with a pair rule or, on a
   lab of up to 64 nodes, one per peer, u32 filters by destination address,
   netem leaves for latency), and what it
   receives, redirected from eth0's ingress to an ifb device shaped the same way
   (filters by source address);
3. execs ARGV through `setpriv` as uid/gid 1000 with every capability set
   emptied (bounding set, inheritable, and — leaving root — permitted, effective,
   ambient), so that no rank can change the shaping: `tc` in a rank answers
   "Operation not permitted". `no-new-privileges` (the compose render's) keeps
   it so through any exec.

Standard library only: it runs in the image before torch is imported.
Exit 2, with one line naming the tc command and its error, when shaping fails.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from typing import Any, Mapping, Sequence

DEVICE = "eth0"                  # the container's interface on the lab network
IFB = "lab-in"                   # where eth0's ingress is redirected to be shaped
UNLIMITED_BPS = 10 ** 12         # htb needs a rate: a direction without one gets 1 tbit/s
DEFAULT_MINOR = 0x10             # class 1:10: the data no peer's class claims
ACK_MINOR = 0x2                  # class 1:2: its TCP ACKs, served first
PEER_MINOR = 0x100               # class 1:<100 + peer node, in hex>: a pair rule's data
PEER_ACK_MINOR = 0x2000          # class 1:<2000 + peer node>: its ACKs (own latency)
NETEM_LIMIT = 10000              # packets a netem leaf holds (delay x rate / MTU, with room)
QUEUE_MS = 200                   # a data class's queue holds this much of its rate
MIN_QUEUE_BYTES = 256 * 1024
LAB_UID = LAB_GID = 1000         # the lab images' user (images/cpu/Dockerfile)
PREFIX = "labctl-shape:"
SHAPED_ENV = "LAB_LINK_SHAPED"   # what this step applied, for the node's processes


class ShapeError(Exception):
    """Shaping failed; the message is one line for the node log."""


def quantum(rate_bps: int) -> int:
    """htb's DRR quantum in bytes: rate/10 (its r2q default), kept where tc does not warn."""
    return max(1514, min(200_000, rate_bps // 8 // 10))


def queue_bytes(rate_bps: int) -> int:
    """A data class's queue: QUEUE_MS of its rate, at least MIN_QUEUE_BYTES, deep enough that
    it does not drop. On egress the queue is this node's own TCP's, and TCP Small Queues
    already bounds what each socket puts in it (tcp_limit_output_bytes, the pacing rate x
    1 ms): a drop there is no loss on a wire but a send refused, and a socket that had
    nothing else in flight then waits for its 200 ms probe timer before it sends again (a
    20 ms queue did that to a root sending to two or three peers at once, and to every
    rank of an all_to_all: calls of 65 ms took 250 to 330 ms). On ingress (the switch
    port's buffer towards the node) several senders converge: 20 ms dropped, 200 ms did
    not, on 4 nodes at 100 Mbit/s (docs/network.md). htb's default leaf (pfifo, 1000
    packets of up to 64 KiB) would hold seconds."""
    return max(MIN_QUEUE_BYTES, rate_bps // 8 * QUEUE_MS // 1000)


def _class(dev: str, minor: int, rate_bps: int, ceil_bps: int, prio: int,
           quantum_bytes: int | None = None) -> list[str]:
    return ["tc", "class", "add", "dev", dev, "parent", "1:1", "classid", f"1:{minor:x}",
            "htb", "rate", f"{rate_bps}bit", "ceil", f"{ceil_bps}bit", "prio", str(prio),
            "quantum", str(quantum_bytes or quantum(rate_bps))]


def _leaf(dev: str, minor: int, rate_bps: int, latency_us: int | None) -> list[str]:
    """The queue of class 1:<minor>: netem for a latency, else a byte FIFO (queue_bytes)."""
    head = ["tc", "qdisc", "add", "dev", dev, "parent", f"1:{minor:x}", "handle", f"{minor:x}:"]
    if latency_us:
        return [*head, "netem", "delay", f"{latency_us}us", "limit", str(NETEM_LIMIT)]
    return [*head, "bfifo", "limit", str(queue_bytes(rate_bps))]


def _filter(dev: str, prio: int, matches: list[str], minor: int) -> list[str]:
    return ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", str(prio),
            "u32", *matches, "flowid", f"1:{minor:x}"]


# A bare TCP ACK (IPv4, no IP options, TCP, under 128 bytes): it goes ahead of the data
# queue (the classic wondershaper filter), so that a transfer one way does not starve the
# other way's ACKs: both directions of a shaped link then carry their rate at once.
ACK_MATCH = ["match", "ip", "protocol", "6", "0xff", "match", "u8", "0x05", "0x0f", "at", "0",
             "match", "u16", "0x0000", "0xff80", "at", "2"]


def _direction(dev: str, own: Mapping[str, Any], peers: Sequence[tuple[int, str, Mapping[str, Any]]],
               match: str, fair: Sequence[tuple[int, str]] | None = None) -> list[list[str]]:
    """htb on `dev`: 1:1 the node's rate; under it 1:10 the data no peer's class claims and 1:2
    its ACKs (first); per peer with a pair rule 1:1xx its data (and 1:2xxx its ACKs when
    the pair's latency differs). `match` is `dst` (egress: the peer is the destination)
    or `src` (ingress). `fair` (egress only; None on ingress): the peers without a pair
    rule, each given a class 1:1xx of its own; then every peer class and 1:10 share the
    node's rate evenly (see `fair_share`), pair rule or not."""
    top = own.get("rate_bps") or UNLIMITED_BPS
    own_delay = own.get("latency_us")
    classes = len(peers) + len(fair or ()) + 1      # every peer's class and 1:10
    share = fair_share(top, classes) if fair is not None and classes > 1 else None
    cmds = [["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
             "default", f"{DEFAULT_MINOR:x}"],
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
             "rate", f"{top}bit", "ceil", f"{top}bit", "quantum", str(quantum(top))],
            _class(dev, DEFAULT_MINOR, share or top, top, 1, quantum(top)),
            _leaf(dev, DEFAULT_MINOR, top, own_delay),
            _class(dev, ACK_MINOR, max(1, top // 10), top, 0)]
    if own_delay:
        cmds.append(_leaf(dev, ACK_MINOR, top, own_delay))
    for node, address, link in peers:
        rate = min(top, link.get("rate_bps") or top)
        delay = link.get("latency_us")
        data, acks = PEER_MINOR + node, PEER_ACK_MINOR + node
        peer = ["match", "ip", match, f"{address}/32"]
        cmds += [_class(dev, data, min(rate, share) if share else rate, rate, 1,
                        quantum(top) if share else None),
                 _leaf(dev, data, rate, delay)]
        if delay != own_delay:
            cmds += [_class(dev, acks, max(1, rate // 10), rate, 0)]
            if delay:
                cmds.append(_leaf(dev, acks, rate, delay))
            cmds.append(_filter(dev, 1, [*ACK_MATCH, *peer], acks))
        cmds.append(_filter(dev, 3, peer, data))
    for node, address in fair or ():
        data = PEER_MINOR + node
        cmds += [_class(dev, data, share, top, 1, quantum(top)), _leaf(dev, data, top, own_delay),
                 _filter(dev, 3, ["match", "ip", match, f"{address}/32"], data)]
    cmds.append(_filter(dev, 2, ACK_MATCH, ACK_MINOR))
    return cmds


def fair_share(top_bps: int, buckets: int) -> int:
    """Each peer class's guaranteed rate when a node's egress is shared per peer: 9/10 of
    the node's rate (the ACK class keeps 1/10) split evenly; above it a class borrows up
    to the node's rate, and htb lends what is spare round-robin by equal quanta. So peers
    share the cable max-min fairly, as a host's own per-flow queue (Linux's fq_codel, fq)
    shares it, and as `labctl predict` replays it. One byte FIFO for every peer did not:
    a root sending to a fast and a slow peer gave the fast one 56-61 % of its cable,
    and a small message to one peer (gloo's ready-to-receive notice) waited behind up to
    200 ms of data to another (docs/network.md)."""
    return max(1, (top_bps - top_bps // 10) // max(1, buckets))


def commands(shape: Mapping[str, Any], addresses: Mapping[str, str]) -> list[list[str]]:
    """Every `ip`/`tc` command that shapes this node, in order (pure: tests read it).
    `addresses`: each peer's hostname -> IPv4 address."""
    device = shape.get("device", DEVICE)
    ifb = shape.get("ifb", IFB)
    peers = shape.get("peers", [])
    fair = [(p["node"], addresses[p["host"]]) for p in shape.get("fair", []) if p["host"] in addresses]
    egress = _direction(device, shape["egress"],
                        [(p["node"], addresses[p["host"]], p["egress"]) for p in peers], "dst",
                        fair if "fair" in shape else None)
    redirect = [["ip", "link", "add", ifb, "type", "ifb"],
                ["ip", "link", "set", ifb, "up"],
                ["tc", "qdisc", "add", "dev", device, "handle", "ffff:", "ingress"],
                ["tc", "filter", "add", "dev", device, "parent", "ffff:", "protocol", "all", "u32",
                 "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb]]
    ingress = _direction(ifb, shape["ingress"],
                         [(p["node"], addresses[p["host"]], p["ingress"]) for p in peers], "src")
    return egress + redirect + ingress


def resolve(hosts: Sequence[str], timeout: float, optional: Sequence[str] = ()) -> dict[str, str]:
    """Each host's IPv4 address, waiting for names the lab's DNS does not know yet: `hosts`
    (a pair rule's peers) must resolve within `timeout`; `optional` ones (the peers that only
    get a fair class) are left out when they do not, and their data shares class 1:10."""
    deadline = time.monotonic() + timeout
    found: dict[str, str] = {}
    wanted = list(dict.fromkeys([*hosts, *optional]))
    while True:
        for host in wanted:
            if host not in found:
                try:
                    found[host] = socket.gethostbyname(host)
                except OSError as exc:
                    if time.monotonic() > deadline and host in hosts:
                        raise ShapeError(f"peer {host} did not resolve within {timeout:g}s ({exc}); "
                                         "a pair rule needs its address") from None
        if len(found) == len(wanted) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def apply(cmds: Sequence[Sequence[str]]) -> None:
    for argv in cmds:
        done = subprocess.run(list(argv), capture_output=True, text=True)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no output"])[-1]
            hint = (" (shaping needs root with NET_ADMIN in the container, as labctl's compose "
                    "render gives the shaped nodes)") if "not permitted" in why else ""
            raise ShapeError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {why}{hint}")


def _rate(bps: int | None) -> str:
    if not bps:
        return "unshaped"
    for unit, size in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= size:
            return f"{bps / size:g} {unit}"
    return f"{bps} bit/s"


def summary(shape: Mapping[str, Any], addresses: Mapping[str, str]) -> str:
    """One line for the node log: what this node's link now is."""
    def side(link):
        text = _rate(link.get("rate_bps"))
        return text + (f" +{link['latency_us'] / 1000:g} ms" if link.get("latency_us") else "")
    pairs = "; ".join(f"node {p['node']} ({addresses.get(p['host'], '?')}) out {side(p['egress'])}, "
                      f"in {side(p['ingress'])}" for p in shape.get("peers", []))
    fair = shape.get("fair", [])
    shared = (f"; out shared per peer ({sum(p['host'] in addresses for p in fair)} of {len(fair)} "
              "peers without a pair rule resolved)") if fair else ""
    return (f"{PREFIX} node {shape['node']}: {shape.get('device', DEVICE)} out {side(shape['egress'])}, "
            f"in {side(shape['ingress'])} (ifb {shape.get('ifb', IFB)})"
            + (f"; pairs: {pairs}" if pairs else "") + shared)


def drop_privileges_argv(argv: Sequence[str]) -> list[str]:
    """`setpriv` (util-linux) to the lab's user with every capability set empty."""
    return ["setpriv", f"--reuid={LAB_UID}", f"--regid={LAB_GID}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--", *argv]


def lab_user_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with HOME, USER and LOGNAME of the lab's user (root's were set)."""
    out = dict(env)
    try:
        user = pwd.getpwuid(LAB_UID)
        out.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    except KeyError:
        out.update(HOME="/tmp")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads._shape", description=__doc__.split("\n")[0])
    parser.add_argument("--node", required=True, help="this node's shaping, JSON (labctl.backends.compose.shaping.node_shaping)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the node's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run after shaping (-- ARGV...)")
    shape = json.loads(args.node)
    try:
        if shutil.which("tc") is None or shutil.which("setpriv") is None:
            raise ShapeError("tc (iproute2) and setpriv (util-linux) must be in the image")
        addresses = resolve([p["host"] for p in shape.get("peers", [])],
                            float(shape.get("resolve_timeout", 120)),
                            [p["host"] for p in shape.get("fair", [])])
        apply(commands(shape, addresses))
    except ShapeError as exc:
        print(f"{PREFIX} error: node {shape.get('node')}: {exc}", file=sys.stderr, flush=True)
        return 2
    line = summary(shape, addresses)
    print(line, flush=True)
    env = lab_user_env(os.environ)
    env[SHAPED_ENV] = line.removeprefix(PREFIX).strip()    # the links workload checks the lock
    os.execvpe("setpriv", drop_privileges_argv(command), env)
    return 0     # not reached


if __name__ == "__main__":
    sys.exit(main())
