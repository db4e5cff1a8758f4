"""The collectives' algorithms, declared once: what each one sends, to whom, and when.

Standard library only (labctl and every rank import it). One registry, read by:

- the bench workload and its report (`busbw_factor`: nccl-tests' bus-bandwidth factor),
- the cost model (`workloads/_costmodel.py`: each algorithm's closed form, t = steps(n) α
  + factor(n) S / B) and the replay (`workloads/_protocol/replay.py`: the algorithm's own
  messages played over the lab's links), which `labctl predict` uses,
- the exercises (`workloads/_protocol/exercises.py`: the traffic optimum a learner's
  algorithm is graded against).

Three families (`Algorithm.family`):

- `gloo`: what gloo runs for torch 2.13's ProcessGroupGloo on CPU tensors, read from gloo's
  source (facebookincubator/gloo, gloo/*.cc) and torch's (ProcessGroupGloo.cpp): its ring
  all-reduce (gloo/allreduce.cc `ring()`: ProcessGroupGloo leaves the algorithm unset, which
  is the ring; bcube only when asked), its allgather ring moving each block in two halves,
  its binomial-tree broadcast, its ring reduce then gather to the root, its all-to-all
  posting every send at once, and reduce_scatter as torch does it on gloo: an all-reduce of
  the whole buffer, each rank keeping its block.
- `nccl`: the algorithms nccl-tests' doc/PERFORMANCE.md reasons with, on paper (ring for
  every collective; the double binary tree for all_reduce as an alternative). Not measured
  here: the lab has no GPU.
- `p2p`: the textbook algorithms the exercises ask a learner to write from send/recv.

What each algorithm sends is its `Schedule` (schedules.py beside this module: the
schedule model and the gloo, nccl and textbook message schedules); this module declares
per op and family which one runs, its closed form and its traffic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .schedules import (
    Schedule, all_at_once, binomial_broadcast, ceil_log2, double_binary_tree, gloo_allgather,
    gloo_alltoall_variants, gloo_reduce, gloo_ring_allreduce, naive_allreduce, nccl_alltoall,
    nccl_chain_broadcast, nccl_chain_reduce, nccl_ring_allgather, nccl_ring_allreduce,
    nccl_ring_reduce_scatter, pingpong, send_ring,
)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")
P2P = ("pingpong", "ring")
OPS = COLLECTIVES + P2P
# Ops whose size S is the total array, split into n equal per-rank blocks (nccl-tests' S).
BLOCKED = ("all_gather", "reduce_scatter", "all_to_all")
MiB = 1 << 20


# ---- per op: nccl-tests' definitions -------------------------------------------------
def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth correction factor for `op` on `n` ranks (doc/PERFORMANCE.md):
    busbw = algbw x factor, comparable with a link's peak whatever n."""
    if n < 1:
        raise ValueError(f"busbw_factor: expected n >= 1 ranks, given {n}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in BLOCKED:
        return (n - 1) / n
    if op in ("broadcast", "reduce") or op in P2P:
        return 1.0
    raise ValueError(f"busbw_factor: unknown op {op!r}; known: {', '.join(OPS)}")


BUSBW_FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
                     "all_to_all": "(n-1)/n", "broadcast": "1", "reduce": "1", "pingpong": "1", "ring": "1"}

# nccl-tests' program for each op (its JSON file is one program's run): sendrecv_perf is a ring
# of sends (each rank to the next, from the previous), the bench's `ring`; pingpong has none.
NCCL_TESTS_PROGRAM = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
                      "reduce_scatter": "reduce_scatter_perf", "broadcast": "broadcast_perf",
                      "reduce": "reduce_perf", "all_to_all": "alltoall_perf", "ring": "sendrecv_perf",
                      "pingpong": "pingpong"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce")


# ---- the registry ----------------------------------------------------------------------
@dataclass(frozen=True)
class Traffic:
    """The bytes one call of the algorithm sends: `rank_most` from one rank at most (its
    chunks rounded up), `total` from all ranks together; `padded_total`: all ranks together
    when every rank's chunks are padded to the largest (a ring on equal-sized buffers, n not
    dividing S), what the chunking itself needs beyond `total` (None: no chunks to pad)."""
    rank_most: float
    total: float
    padded_total: float | None = None

    @property
    def allowed_total(self) -> float:
        """The most all ranks together may send: the optimum, or its padded chunks."""
        return self.total if self.padded_total is None else max(self.total, self.padded_total)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of one op: its messages (`build`), their closed form t = steps(n) α +
    factor(n) S / B on uniform links (`steps`, `factor`: messages one after another, bytes
    on the busiest link per byte of S), where it was read, and for the exercises the traffic
    optimum."""
    key: str                         # family.name, e.g. gloo.ring_allreduce
    op: str                          # the bench op it runs (p2p: the collective it computes)
    name: str                        # in words
    source: str                      # where the schedule was read
    steps_text: str
    factor_text: str
    steps: Callable[[int], float]
    factor: Callable[[int], float]
    build: Callable[..., Schedule]
    optimum: str = ""                # the exercises: the traffic the algorithm needs, in words
    traffic: Callable[[int, int, int, int], Traffic | None] | None = None
    # the ways one call may go, equally likely, when that depends on how the ranks enter it
    # (gloo's all_to_all); None: `build`'s one schedule
    variants: Callable[..., tuple[Schedule, ...]] | None = None

    @property
    def family(self) -> str:
        return self.key.split(".", 1)[0]

    def schedule(self, n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
        """The messages of one call; for an algorithm with variants, the one where every
        message goes as early as it can (the fastest way)."""
        return self.build(n, int(size), itemsize, root)

    def schedules(self, n: int, size: int, itemsize: int = 4, root: int = 0) -> tuple[Schedule, ...]:
        """Every way one call may go, equally likely (one for most algorithms)."""
        if self.variants is None:
            return (self.schedule(n, size, itemsize, root),)
        return self.variants(n, int(size), itemsize, root)


def binomial_factor(n: int) -> float:
    """Bytes-time of the binomial broadcast on uniform links, in S / B: a rank's sends go at
    once and share its link (k sends take k S / B), so a child has the data k S / B after
    its parent, k its parent's sends (n = 2^d: d(d+1)/2; n = 3: 2, n = 4: 3, n = 8: 6)."""
    if n < 2:
        return 0.0
    has = {0: 0.0}
    dim = ceil_log2(n)
    for v in range(n):
        kids = [v + (1 << j) for j in range(v.bit_length(), dim) if v + (1 << j) < n]
        for child in kids:
            has[child] = has[v] + len(kids)
    return max(has.values())


def _tree_depth(n: int) -> float:
    """Messages one after another in the binomial tree: virtual rank v is popcount(v) hops
    from the root, and the largest popcount below n is floor(log2 n)."""
    return float(n.bit_length() - 1) if n > 1 else 0.0


def _ring2(n): return 2.0 * (n - 1)
def _ring1(n): return float(n - 1)
def _one(n): return 1.0 if n > 1 else 0.0
def _ar_factor(n): return 2.0 * (n - 1) / n
def _rs_factor(n): return (n - 1) / n


_COMMON_P2P = "labctl's bench (workloads/bench.py)"
ALGORITHMS: dict[str, Algorithm] = {a.key: a for a in (
    # gloo, torch 2.13 on CPU tensors
    Algorithm("gloo.ring_allreduce", "all_reduce",
              "ring: reduce-scatter, then all-gather, in segments (>= 2 per rank, <= 1 MiB), two in flight",
              "gloo/allreduce.cc ring(); ProcessGroupGloo sets no algorithm, which is the ring",
              "2(n-1)", "2(n-1)/n", _ring2, _ar_factor, gloo_ring_allreduce),
    Algorithm("gloo.allreduce_reduce_scatter", "reduce_scatter",
              "all_reduce of the whole buffer (gloo's ring), each rank keeps its block",
              "ProcessGroupGloo::reduce_scatter_tensor_coalesced: clone, allreduce, copy the rank's chunk",
              "2(n-1)", "2(n-1)/n", _ring2, _ar_factor, gloo_ring_allreduce),
    Algorithm("gloo.ring_allgather", "all_gather", "ring, each block in two halves, two in flight",
              "gloo/allgather.cc", "n-1", "(n-1)/n", _ring1, _rs_factor, gloo_allgather),
    Algorithm("gloo.binomial_broadcast", "broadcast",
              "binomial tree from the root, a rank's sends all at once",
              "gloo/broadcast.cc", "floor(log2 n)", "binomial (n=3: 2, 4: 3, 8: 6)",
              _tree_depth, binomial_factor, binomial_broadcast),
    Algorithm("gloo.ring_reduce", "reduce", "ring reduce-scatter, then every chunk to the root at once",
              "gloo/reduce.cc", "n", "2(n-1)/n", lambda n: float(n), _ar_factor, gloo_reduce),
    Algorithm("gloo.alltoall", "all_to_all",
              "every send posted at once; a pair's two directions at once or one after the other, "
              "by how its ranks enter", "gloo/alltoall.cc, gloo/transport/tcp/pair.cc", "1", "(n-1)/n",
              _one, _rs_factor, all_at_once, variants=gloo_alltoall_variants),
    Algorithm("gloo.pingpong", "pingpong", "one message, one way (half a round trip)", _COMMON_P2P,
              "1", "1", _one, _one, pingpong),
    Algorithm("gloo.ring", "ring", "one ring step: send right, receive left, all at once", _COMMON_P2P,
              "1", "1", _one, _one, send_ring),
    # NCCL on paper (nccl-tests' doc/PERFORMANCE.md; not measured: the lab has no GPU)
    Algorithm("nccl.ring_allreduce", "all_reduce", "ring: reduce-scatter, then all-gather",
              "nccl-tests doc/PERFORMANCE.md", "2(n-1)", "2(n-1)/n", _ring2, _ar_factor, nccl_ring_allreduce),
    Algorithm("nccl.double_binary_tree", "all_reduce",
              "double binary tree: reduce up, broadcast down, 512 KiB slices, half of S per tree",
              "NCCL's tree algorithm, on paper", "2 log2 n", "~2", lambda n: 2.0 * ceil_log2(n),
              lambda n: 2.0 if n > 2 else 1.0, double_binary_tree),
    Algorithm("nccl.ring_allgather", "all_gather", "ring", "nccl-tests doc/PERFORMANCE.md",
              "n-1", "(n-1)/n", _ring1, _rs_factor, nccl_ring_allgather),
    Algorithm("nccl.ring_reduce_scatter", "reduce_scatter", "ring", "nccl-tests doc/PERFORMANCE.md",
              "n-1", "(n-1)/n", _ring1, _rs_factor, nccl_ring_reduce_scatter),
    Algorithm("nccl.ring_broadcast", "broadcast", "pipelined ring (a chain) from the root, 512 KiB slices",
              "nccl-tests doc/PERFORMANCE.md", "n-1", "1", _ring1, _one, nccl_chain_broadcast),
    Algorithm("nccl.ring_reduce", "reduce", "pipelined ring (a chain) to the root, 512 KiB slices",
              "nccl-tests doc/PERFORMANCE.md", "n-1", "1", _ring1, _one, nccl_chain_reduce),
    Algorithm("nccl.alltoall", "all_to_all", "every send posted at once (grouped)",
              "nccl-tests src/alltoall.cu", "1", "(n-1)/n", _one, _rs_factor, nccl_alltoall),
    Algorithm("nccl.pingpong", "pingpong", "one message, one way (half a round trip)", _COMMON_P2P,
              "1", "1", _one, _one, pingpong),
    Algorithm("nccl.ring", "ring", "one ring step: send right, receive left, all at once",
              "nccl-tests src/sendrecv.cu", "1", "1", _one, _one, send_ring),
    # the exercises (docs/exercises.md): what a learner writes from send/recv, and its optimum
    # (S: the exercise's own size: the tensor, one rank's tensor, one output or one block)
    Algorithm("p2p.ring_allreduce", "all_reduce", "ring all-reduce, chunked (reduce-scatter, then all-gather)",
              "the tutorial's exercise", "2(n-1)", "2(n-1)/n", _ring2, _ar_factor, nccl_ring_allreduce,
              "2(n-1)/n x S per rank",
              lambda n, rank, size, item: Traffic(2 * (n - 1) * math.ceil(size / n) * item, 2 * (n - 1) * size * item,
                                                  n * 2 * (n - 1) * math.ceil(size / n) * item)),
    Algorithm("p2p.naive_allreduce", "all_reduce", "through rank 0: everyone sends to it, it sends the sum back",
              "the baseline", "2", "2(n-1)", lambda n: 2.0, lambda n: 2.0 * (n - 1), naive_allreduce,
              "rank 0: (n-1) x S, the others: S",
              lambda n, rank, size, item: Traffic((n - 1) * size * item if rank == 0 else size * item,
                                                  2 * (n - 1) * size * item)),
    Algorithm("p2p.tree_broadcast", "broadcast", "binomial tree from any rank", "gloo/broadcast.cc's tree",
              "floor(log2 n)", "binomial", _tree_depth, binomial_factor,
              lambda n, size, item=4, root=0: binomial_broadcast(n, size, item, root, "p2p.tree_broadcast"),
              "at most ceil(log2 n) x S from any rank, (n-1) x S in all",
              lambda n, rank, size, item: Traffic(ceil_log2(n) * size * item if n > 1 else 0,
                                                  (n - 1) * size * item)),
    Algorithm("p2p.ring_allgather", "all_gather", "ring: n-1 steps, each rank passes on what it received last",
              "the textbook ring", "n-1", "(n-1)/n", _ring1, _rs_factor, nccl_ring_allgather,
              "(n-1) x S per rank (S: one rank's tensor)",
              lambda n, rank, size, item: Traffic((n - 1) * size * item, n * (n - 1) * size * item)),
    Algorithm("p2p.reduce_scatter", "reduce_scatter", "ring reduce-scatter: n-1 steps of one block",
              "the textbook ring", "n-1", "(n-1)/n", _ring1, _rs_factor, nccl_ring_reduce_scatter,
              "(n-1) x S per rank (S: one output)",
              lambda n, rank, size, item: Traffic((n - 1) * size * item, n * (n - 1) * size * item)),
    Algorithm("p2p.all_to_all", "all_to_all", "pairwise: every block straight to its rank",
              "the textbook exchange", "1", "(n-1)/n", _one, _rs_factor, all_at_once,
              "(n-1) x S per rank (S: one block)",
              lambda n, rank, size, item: Traffic((n - 1) * size * item, n * (n - 1) * size * item)),
)}

# The algorithm each family runs for each op (NCCL picks ring or tree by size and topology;
# on paper the ring, as nccl-tests' busbw assumes).
DEFAULTS: dict[str, dict[str, str]] = {
    "gloo": {"all_reduce": "gloo.ring_allreduce", "reduce_scatter": "gloo.allreduce_reduce_scatter",
             "all_gather": "gloo.ring_allgather", "broadcast": "gloo.binomial_broadcast",
             "reduce": "gloo.ring_reduce", "all_to_all": "gloo.alltoall", "pingpong": "gloo.pingpong",
             "ring": "gloo.ring"},
    "nccl": {"all_reduce": "nccl.ring_allreduce", "reduce_scatter": "nccl.ring_reduce_scatter",
             "all_gather": "nccl.ring_allgather", "broadcast": "nccl.ring_broadcast",
             "reduce": "nccl.ring_reduce", "all_to_all": "nccl.alltoall", "pingpong": "nccl.pingpong",
             "ring": "nccl.ring"},
}


def family_for(dist_backend: str | None) -> str:
    """The algorithms a run's backend runs: gloo's (read from its source) or NCCL's on paper."""
    return "gloo" if dist_backend == "gloo" else "nccl"


def algorithm(family: str, op: str) -> Algorithm:
    """The algorithm `family` runs for `op`."""
    try:
        return ALGORITHMS[DEFAULTS[family][op]]
    except KeyError:
        raise ValueError(f"no {family} algorithm for {op!r}; known: "
                         f"{', '.join(DEFAULTS.get(family, {})) or 'families ' + ', '.join(DEFAULTS)}") from None


def of(family: str, op: str | None = None) -> list[Algorithm]:
    """Every algorithm of a family (of one op)."""
    return [a for a in ALGORITHMS.values() if a.family == family and (op is None or a.op == op)]
