"""The pair matrix's schedule and verdict, as pure functions (no torch).

Shared by the `links` workload (which runs in every node) and its report hook
(`workloads/_report/links.py`), as `_benchmath` is by bench.

Schedule: every pair of nodes once, in rounds of disjoint pairs that run at the
same time (the circle method of a round-robin tournament): n - 1 rounds of n/2
pairs for an even n; n rounds with one node resting per round for an odd n.

Verdict: which pairs and nodes are slow. A pair's bandwidth is the better of its
two directions (what the pair showed it can do: a link the lab shapes is shaped both
ways, and on a loaded machine one direction may lose its CPU for a moment; the
matrix shows each direction). The reference is what a typical node reaches: the median, over
nodes, of each node's best pair. A pair below `fraction` x reference is slow; a
node whose best pair is slow (every pair it is in is slow) is a slow node. The
median of all pairs would not do: with one slow node among three, two of the
three pairs are slow and the median itself is slow.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

DEFAULT_SLOW_FRACTION = 0.5


def rounds(nodes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Every unordered pair of `nodes` exactly once, in rounds of disjoint pairs.
    Each pair is (smaller, larger)."""
    order = list(nodes)
    if len(order) < 2:
        return []
    if len(order) % 2:
        order.append(None)                       # the resting seat
    n = len(order)
    out = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = order[i], order[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        order = [order[0], order[-1], *order[1:-1]]   # rotate all but the first seat
    return out


def round_count(n: int) -> int:
    """Rounds for n nodes: n - 1 (even n) or n (odd n); 0 below 2."""
    return 0 if n < 2 else (n - 1 if n % 2 == 0 else n)


@dataclass(frozen=True)
class PairSpeed:
    """One unordered pair: its better direction's bandwidth (bytes/s) and the directions."""
    a: int
    b: int
    Bps: float
    forward_Bps: float | None      # a -> b
    backward_Bps: float | None     # b -> a


@dataclass(frozen=True)
class Verdict:
    reference_Bps: float | None    # the median over nodes of each node's best pair
    fraction: float
    slow_pairs: tuple[tuple[int, int], ...]
    slow_nodes: tuple[int, ...]
    pairs: tuple[PairSpeed, ...]

    @property
    def threshold_Bps(self) -> float | None:
        return None if self.reference_Bps is None else self.fraction * self.reference_Bps


def pair_speeds(directed: Mapping[tuple[int, int], float]) -> list[PairSpeed]:
    """{(src, dst): bytes/s} -> one PairSpeed per unordered pair (the better direction)."""
    out = []
    for a, b in sorted({(min(s, d), max(s, d)) for s, d in directed}):
        fwd, back = directed.get((a, b)), directed.get((b, a))
        known = [v for v in (fwd, back) if v is not None]
        out.append(PairSpeed(a, b, max(known), fwd, back))
    return out


def verdict(directed: Mapping[tuple[int, int], float],
            fraction: float = DEFAULT_SLOW_FRACTION) -> Verdict:
    """Slow pairs and slow nodes from each direction's bandwidth (see the module's doc)."""
    pairs = pair_speeds(directed)
    best: dict[int, float] = {}
    for p in pairs:
        for node in (p.a, p.b):
            best[node] = max(best.get(node, 0.0), p.Bps)
    if len(pairs) < 2 or not best:
        return Verdict(None, fraction, (), (), tuple(pairs))   # one pair: nothing to compare with
    reference = statistics.median(best.values())
    threshold = fraction * reference
    slow_pairs = tuple((p.a, p.b) for p in pairs if p.Bps < threshold)
    slow_nodes = tuple(sorted(n for n, speed in best.items() if speed < threshold))
    return Verdict(reference, fraction, slow_pairs, slow_nodes, tuple(pairs))


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))
