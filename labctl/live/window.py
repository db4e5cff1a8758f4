"""The stall window: how long an op may wait before the lab is called stalled (issue 49).

Not a guess: an op is expected to take what the lab's own cost model says for its size
over the lab's links (workloads/_protocol/algorithms.py: t = steps(n) α + factor(n) S / B,
gloo's algorithms for gloo, NCCL's on paper for the rest), and the window is the larger of
the floor (`stall_window`, 10 s by default) and MULTIPLE times that. So a 32 MiB all_reduce
over a 10 Mbit/s link (about 27 s a call) gets about two minutes, a 4 KiB one the floor.

B is the slowest rate the lab's links set (the shaped link every ring crosses); where the
lab sets none, DEFAULT_BANDWIDTH_Bps, far below what loopback or a container bridge does
on a loaded 2-core machine, so that the window errs long. A link's delay adds to α.
"""
from __future__ import annotations

from dataclasses import dataclass

from workloads._protocol import algorithms, ops

from ..links import Links

MULTIPLE = 4.0                       # the window is this many times an op's expected time (or the floor)
DEFAULT_BANDWIDTH_Bps = 50e6         # bytes/s of a link the lab does not shape (errs slow: loopback does ~1 GB/s)
DEFAULT_ALPHA_S = 2e-3               # one message's cost on the way, software included (errs slow)


@dataclass(frozen=True)
class Window:
    """The lab's stall window: its floor, and what its links let a byte cost."""
    floor_s: float
    bandwidth_Bps: float = DEFAULT_BANDWIDTH_Bps
    alpha_s: float = DEFAULT_ALPHA_S
    family: str = "gloo"

    @classmethod
    def of(cls, floor_s: float, links: Links | None, dist_backend: str | None) -> "Window":
        rates = [link.rate_bps for link in _rules(links) if link.rate_bps]
        delays = [link.latency_us for link in _rules(links) if link.latency_us]
        bandwidth = min(rates) / 8 if rates else DEFAULT_BANDWIDTH_Bps
        alpha = DEFAULT_ALPHA_S + (2 * max(delays) / 1e6 if delays else 0.0)   # both cables' delays
        return cls(floor_s, min(bandwidth, DEFAULT_BANDWIDTH_Bps), alpha, algorithms.family_for(dist_backend))

    def expected_s(self, op: str, nbytes: int, members: int) -> float:
        """What `op` of `nbytes` (one rank's input) among `members` ranks is expected to take."""
        n = max(2, members)
        algo = self._algorithm(op)
        if algo is not None:
            return algo.steps(n) * self.alpha_s + algo.factor(n) * nbytes / self.bandwidth_Bps
        spec = ops.OPS.get(op)
        if spec is not None and spec.p2p:           # one message
            return self.alpha_s + nbytes / self.bandwidth_Bps
        # gather, scatter, barrier, an op the table does not know: every rank's bytes through one link
        return n * self.alpha_s + n * nbytes / self.bandwidth_Bps

    def for_op(self, op: str, nbytes: int, members: int) -> float:
        """Seconds `op` may wait before it is a stall: the floor, or MULTIPLE times its expected time."""
        return max(self.floor_s, MULTIPLE * self.expected_s(op, nbytes, members))

    def _algorithm(self, op: str) -> algorithms.Algorithm | None:
        base = _BENCH_OP.get(op, op)
        try:
            return algorithms.algorithm(self.family, base)
        except ValueError:
            return None


# the trace's op -> the cost model's (the bench's) op of the same algorithm
_BENCH_OP = {"all_reduce_coalesced": "all_reduce", "all_gather_into_tensor": "all_gather",
             "all_gather_coalesced": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
             "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
             "all_to_all_single": "all_to_all"}


def _rules(links: Links | None) -> list:
    if links is None:
        return []
    return [links.default, *links.nodes.values(), *links.pairs.values()]
