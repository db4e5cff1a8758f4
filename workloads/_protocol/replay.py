"""Replay an algorithm's messages over a lab's links: what one call costs, and why.

Standard library only. A `Schedule` (workloads/_protocol/algorithms.py) says which messages
one call sends and what each waits for; a `Network` says what the links carry:

- every node's cable caps what the node sends (`egress`) and what it receives (`ingress`),
  each direction on its own, as labctl's `links:` shape them (docs/network.md);
- a pair rule caps the traffic from one node to another (`pair`, per direction);
- a path adds its one-way latency to every message (`latency`);
- ranks on one node talk through the node's loopback (`local`);
- every message costs `alpha` before its data moves (the per-message overhead: software,
  the rendezvous of gloo's tcp transport), fitted once from small messages.

The replay is a fluid simulation: a message goes once everything it waits for has arrived
(plus α); messages between the same two ranks in the same direction go one after another
(one TCP connection); the messages under way share every cap they cross max-min fairly
(as a node's egress, a class per peer, shares its cable); a message arrives its path's latency
after its last byte left. The call ends when its last message arrives. What comes out:
the time, each message's start and end, the bytes per link, the critical path.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from .schedules import Schedule

LOOPBACK_Bps = 3.0e9      # two ranks of one node: ~iperf3 over 127.0.0.1 here (docs/bench.md)
_EPS = 1e-12


@dataclass(frozen=True)
class Network:
    """What the lab's links carry, in bytes per second (math.inf: not limited) and seconds.
    Ranks are placed `ranks_per_node` to a node, in order (rank r on node r // ranks_per_node)."""
    nodes: int
    egress: tuple[float, ...]
    ingress: tuple[float, ...]
    pair: Mapping[tuple[int, int], float] = field(default_factory=dict)       # (a, b): a -> b
    latency: Mapping[tuple[int, int], float] = field(default_factory=dict)    # (a, b): one way
    ranks_per_node: int = 1
    local: float = LOOPBACK_Bps
    alpha: float = 0.0

    @classmethod
    def uniform(cls, nodes: int, rate_Bps: float, *, latency_s: float = 0.0, alpha_s: float = 0.0,
                ranks_per_node: int = 1, local_Bps: float = LOOPBACK_Bps) -> "Network":
        lat = {(a, b): latency_s for a in range(nodes) for b in range(nodes) if a != b} if latency_s else {}
        return cls(nodes, (rate_Bps,) * nodes, (rate_Bps,) * nodes, {}, lat, ranks_per_node, local_Bps, alpha_s)

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def with_node(self, node: int, rate_Bps: float) -> "Network":
        """The same network with one node's cable at `rate_Bps` both ways."""
        egress, ingress = list(self.egress), list(self.ingress)
        egress[node] = ingress[node] = rate_Bps
        return replace(self, egress=tuple(egress), ingress=tuple(ingress))

    def with_pair(self, a: int, b: int, rate_Bps: float) -> "Network":
        """The same network with the traffic between a and b (both ways) capped at `rate_Bps`."""
        return replace(self, pair={**self.pair, (a, b): rate_Bps, (b, a): rate_Bps})

    def scaled(self, factor: float) -> "Network":
        """Every rate times `factor` (a fitted efficiency: TCP/IP headers, the shaper's)."""
        s = lambda x: x * factor if math.isfinite(x) else x      # noqa: E731
        return replace(self, egress=tuple(map(s, self.egress)), ingress=tuple(map(s, self.ingress)),
                       pair={k: s(v) for k, v in self.pair.items()}, local=s(self.local))

    def path_rate(self, a: int, b: int) -> float:
        """The rate one message alone gets from node a to node b."""
        if a == b:
            return self.local
        return min(self.egress[a], self.ingress[b], self.pair.get((a, b), math.inf))

    def slowest(self) -> float:
        """The slowest node-to-node rate (the link a ring crosses at best)."""
        rates = [self.path_rate(a, b) for a in range(self.nodes) for b in range(self.nodes) if a != b]
        return min(rates) if rates else self.local


@dataclass
class Result:
    schedule: Schedule
    seconds: float                       # one call as the bench times it (pingpong: one way)
    makespan: float                      # the last arrival
    start: list[float]                   # per message: when its data began to move
    end: list[float]                     # per message: when it arrived
    link_bytes: dict[tuple[int, int], int]   # (src node, dst node) -> bytes (same node: loopback)
    critical: list[int]                  # messages along the critical path, first to last

    @property
    def messages(self) -> int:
        return len(self.schedule.messages)


class _Flow:
    __slots__ = ("msg", "left", "rate", "since", "cons", "version")

    def __init__(self, msg: int, nbytes: float, cons: tuple, now: float):
        self.msg, self.left, self.rate, self.since, self.cons, self.version = msg, float(nbytes), 0.0, now, cons, 0


def replay(schedule: Schedule, net: Network) -> Result:
    """Play `schedule` over `net` (see the module's text)."""
    msgs = schedule.messages
    count = len(msgs)
    if count == 0:
        return Result(schedule, 0.0, 0.0, [], [], {}, [])
    if net.node_of(schedule.n - 1) >= net.nodes:
        raise ValueError(f"replay: {schedule.n} ranks at {net.ranks_per_node} per node need "
                         f"{net.node_of(schedule.n - 1) + 1} nodes; the network has {net.nodes}")
    waiting = [len(m.after) for m in msgs]
    dependents: list[list[int]] = [[] for _ in msgs]
    for i, m in enumerate(msgs):
        for a in m.after:
            dependents[a].append(i)
    start, end = [math.nan] * count, [math.nan] * count
    ready = [0.0] * count
    caps: dict[tuple, float] = {}
    queues: dict[tuple[int, int], list[int]] = {}
    heads: dict[tuple[int, int], int] = {}          # connection -> index into its queue
    active: dict[tuple, set] = {}                   # constraint -> flows
    flows: dict[int, _Flow] = {}
    events: list[tuple] = []                        # (time, order, seq, kind, msg, version)
    seq = 0

    def push(t: float, kind: int, msg: int, version: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, kind, seq, msg, version))

    def constraints(m) -> tuple:
        a, b = net.node_of(m.src), net.node_of(m.dst)
        if a == b:
            key = ("lo", a)
            caps.setdefault(key, net.local)
            return (key,)
        out = [("out", a), ("in", b)]
        caps.setdefault(out[0], net.egress[a])
        caps.setdefault(out[1], net.ingress[b])
        if (a, b) in net.pair:
            caps.setdefault(("pair", a, b), net.pair[(a, b)])
            out.append(("pair", a, b))
        return tuple(c for c in out if math.isfinite(caps[c]))

    dirty: set = set()
    # kinds, in the order one instant handles them: arrivals free their dependents, data
    # ends free their connection, starts join one
    ARRIVE, DONE, START = 0, 1, 2

    def activate(i: int, now: float) -> None:
        m = msgs[i]
        start[i] = now
        cons = constraints(m)
        if m.nbytes <= 0 or not cons:
            rate = math.inf if m.nbytes > 0 else 0.0
            finish = now if m.nbytes <= 0 or rate == math.inf else now
            push(finish, DONE, i, -1)
            return
        f = _Flow(i, m.nbytes, cons, now)
        flows[i] = f
        for c in cons:
            active.setdefault(c, set()).add(i)
            dirty.add(c)

    for i in range(count):
        if waiting[i] == 0:
            push(net.alpha, START, i)

    now = 0.0
    while events:
        now = events[0][0]
        while events and events[0][0] <= now + _EPS * max(1.0, now):
            t, kind, _, i, version = heapq.heappop(events)
            m = msgs[i]
            if kind == ARRIVE:
                end[i] = t
                for d in dependents[i]:
                    waiting[d] -= 1
                    ready[d] = max(ready[d], t)
                    if waiting[d] == 0:
                        push(ready[d] + net.alpha, START, d)
            elif kind == START:
                conn = (m.src, m.dst)
                q = queues.setdefault(conn, [])
                q.append(i)
                if len(q) - heads.get(conn, 0) == 1:     # the connection was idle
                    activate(i, t)
            else:  # DONE
                f = flows.get(i)
                if version != -1:
                    if f is None or f.version != version:
                        continue                          # a stale finish: the rate changed since
                    del flows[i]
                    for c in f.cons:
                        active[c].discard(i)
                        dirty.add(c)
                a, b = net.node_of(m.src), net.node_of(m.dst)
                push(t + (net.latency.get((a, b), 0.0) if a != b else 0.0), ARRIVE, i)
                conn = (m.src, m.dst)
                heads[conn] = heads.get(conn, 0) + 1
                q = queues[conn]
                if heads[conn] < len(q):
                    activate(q[heads[conn]], t)
        if dirty:
            _share(now, dirty, active, flows, caps, lambda t, i, v: push(t, DONE, i, v))
            dirty = set()

    if any(math.isnan(e) for e in end):
        stuck = [i for i, e in enumerate(end) if math.isnan(e)][:3]
        raise ValueError(f"replay: {schedule.algorithm}: messages {stuck} never went (a wait on a "
                         "message that waits for them)")
    link_bytes: dict[tuple[int, int], int] = {}
    for m in msgs:
        key = (net.node_of(m.src), net.node_of(m.dst))
        link_bytes[key] = link_bytes.get(key, 0) + m.nbytes
    makespan = max(end)
    return Result(schedule, makespan / schedule.per_call, makespan, start, end, link_bytes,
                  _critical(msgs, start, end))


def _share(now: float, dirty: set, active: dict, flows: dict, caps: dict,
           schedule_done: Callable[[float, int, int], None]) -> None:
    """New rates for the flows that share a cap with a changed one (and, through them, every
    flow of their component): max-min fair; then each one's new finish time."""
    seen_c, seen_f = set(), set()
    todo = list(dirty)
    while todo:
        c = todo.pop()
        if c in seen_c:
            continue
        seen_c.add(c)
        for i in active.get(c, ()):
            if i not in seen_f:
                seen_f.add(i)
                todo.extend(x for x in flows[i].cons if x not in seen_c)
    if not seen_f:
        return
    group = [flows[i] for i in seen_f]
    for f in group:                                  # bytes sent at the old rate until now
        f.left = max(0.0, f.left - f.rate * (now - f.since))
        f.since = now
    # Max-min, unweighted: what a shaped node's egress does, a class per peer served
    # round-robin (workloads/_shape.py `fair_share`, as a host's per-flow queue). The lab's
    # queues do not drop (200 ms), so TCP gets no loss to share a queue by. Measured with
    # one slow node (docs/network.md): a root sending to a fast and a slow rank at once
    # gives the fast one 51-52 % of its cable (56-61 % when its egress was one FIFO); the
    # 1/RTT weighting of drop-tail queues (Mathis et al.) fitted the 20 ms queues that dropped.
    rates = _fill(seen_c, seen_f, active, flows, caps, None)
    for i in seen_f:
        flows[i].rate = max(rates[i], 0.0)
    for f in group:
        f.version += 1
        finish = now + (f.left / f.rate if f.rate > 0 else math.inf)
        if math.isfinite(finish):
            schedule_done(finish, f.msg, f.version)


def _fill(caps_in: set, flows_in: set, active: dict, flows: dict, caps: dict,
          weight: dict | None) -> dict:
    """(Weighted) max-min fair rates by progressive filling: the cap whose level (what is
    left of it per unit of weight of its unfrozen flows) is lowest freezes its flows at that
    level times their weight. A level only grows as other caps freeze flows, so a stale heap
    entry is pushed back with its new level."""
    w = (lambda i: 1.0) if weight is None else weight.__getitem__      # noqa: E731
    left = {c: caps[c] for c in caps_in}
    mass = {c: sum(w(i) for i in active.get(c, ()) if i in flows_in) for c in caps_in}
    rates: dict[int, float] = {}
    heap = [(left[c] / mass[c], n, c) for n, c in enumerate(caps_in) if mass[c] > 0]
    heapq.heapify(heap)
    tie = len(heap)
    while len(rates) < len(flows_in) and heap:
        level, _, worst = heapq.heappop(heap)
        if mass[worst] <= 1e-300:
            continue
        now_level = left[worst] / mass[worst]
        if now_level > level * (1 + 1e-12) + 1e-300:
            tie += 1
            heapq.heappush(heap, (now_level, tie, worst))
            continue
        for i in [i for i in active[worst] if i in flows_in and i not in rates]:
            rates[i] = max(now_level, 0.0) * w(i)
            for c in flows[i].cons:
                left[c] -= rates[i]
                mass[c] -= w(i)
    return rates


def _critical(msgs, start: Sequence[float], end: Sequence[float]) -> list[int]:
    """From the last arrival back: at each message, the one it waited for longest (the
    latest of its waits), or, when its data started later than its waits allow, none: the
    chain is as the replay saw it, not a proof of what bound it."""
    last = max(range(len(msgs)), key=lambda i: end[i])
    path = [last]
    while msgs[path[-1]].after:
        path.append(max(msgs[path[-1]].after, key=lambda a: end[a]))
    return path[::-1]


def alpha_beta(schedule: Schedule, net: Network, full: Result | None = None) -> tuple[float, float, Result]:
    """(α term, β term, the replay): β is the replay with no per-message overhead and no
    latency (bytes over links, waiting for a busy link included), α what they add."""
    full = full or replay(schedule, net)
    if not net.alpha and not net.latency:
        return 0.0, full.seconds, full
    bare = replay(schedule, replace(net, alpha=0.0, latency={}))
    return max(0.0, full.seconds - bare.seconds), min(full.seconds, bare.seconds), full


@dataclass(frozen=True)
class Expected:
    """What a call costs when it may go several ways (gloo's all_to_all: `Algorithm.schedules`,
    each way with its odds, `Schedule.weight`): the mean over the ways weighted by their odds,
    the fastest and the slowest."""
    seconds: float
    alpha_term: float
    beta_term: float
    fastest: float
    slowest: float
    ways: int
    result: Result                     # the first way's replay (messages, critical path)


def expected(schedules: Sequence[Schedule], net: Network) -> Expected:
    """Replay every way a call may go (`alpha_beta` each) and average them by their odds."""
    if not schedules:
        raise ValueError("expected: no schedule to replay")
    runs = [alpha_beta(s, net) for s in schedules]
    times = [r[2].seconds for r in runs]
    total = sum(s.weight for s in schedules)
    if not total > 0:
        raise ValueError("expected: the ways' odds add up to nothing")
    mean = lambda xs: sum(s.weight * x for s, x in zip(schedules, xs)) / total     # noqa: E731
    return Expected(mean(times), mean([r[0] for r in runs]), mean([r[1] for r in runs]),
                    min(times), max(times), len(runs), runs[0][2])


# ---- fitting α and the links' efficiency ----------------------------------------------
@dataclass(frozen=True)
class Fit:
    """α (seconds per message) and the efficiency (what the links carry / what they are
    configured to), fitted on one run's measurements, and how far the replay is from them."""
    alpha_s: float
    efficiency: float
    points: int
    rms_error: float
    max_error: float
    source: str                        # which measurements were fitted


def fit(points: Sequence[tuple[Schedule, float]], net: Network, source: str = "") -> Fit | None:
    """α and the efficiency e from (schedule, measured seconds) pairs on `net` (its rates as
    configured, α unset). The replay's time is ~ T0 / e + k α (T0: the replay with no α at
    e = 1; k: how much one α adds, from a second replay). e is fitted on the large messages
    (the two largest sizes of a x4 sweep: a quarter of the largest and up), α on the small
    ones (below that), each by least squares on relative errors with the other held, until
    they settle. Small messages alone would say nothing true about the links: a shaper lets
    a burst through faster than its rate (htb's bucket), so 16 KiB may cross a 100 Mbit/s
    link at 200. None without two sizes."""
    rows = []
    probe = 1e-3
    bare_net = replace(net, alpha=0.0)
    for schedule, seconds in points:
        if seconds <= 0 or not schedule.messages:
            continue
        t0 = replay(schedule, bare_net).seconds
        k = (replay(schedule, replace(net, alpha=probe)).seconds - t0) / probe
        rows.append((t0, k, seconds, schedule.size))
    if len({size for *_, size in rows}) < 2 or not any(t0 > 0 for t0, *_ in rows):
        return None
    largest = max(size for *_, size in rows)
    large = [r for r in rows if r[3] * 4 >= largest and r[0] > 0]
    small = [r for r in rows if r[3] * 4 < largest]
    x, a = 1.0, 0.0
    for _ in range(50):
        # x = 1/e on the large messages, α held: minimise sum ((x t0 + a k - t) / t)^2
        x_new = sum(t0 * (t - a * k) / t ** 2 for t0, k, t, _ in large) / sum((t0 / t) ** 2 for t0, k, t, _ in large)
        kk = sum((k / t) ** 2 for t0, k, t, _ in small)
        a_new = max(0.0, sum(k * (t - x_new * t0) / t ** 2 for t0, k, t, _ in small) / kk) if kk > 0 else 0.0
        settled = abs(x_new - x) <= 1e-12 * x_new and abs(a_new - a) <= 1e-15 + 1e-12 * a_new
        x, a = x_new, a_new
        if settled:
            break
    if x <= 0:
        return None
    errors = [(x * t0 + a * k - t) / t for t0, k, t, _ in rows]
    return Fit(a, 1.0 / x, len(rows), math.sqrt(sum(e * e for e in errors) / len(errors)),
               max(abs(e) for e in errors), source)
