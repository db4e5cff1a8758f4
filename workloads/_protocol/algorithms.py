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

A `Schedule` is the list of messages one call sends: source, destination, bytes, and the
messages that must have arrived before it can go (its sender's waits and its receiver's:
gloo's tcp transport sends a message's data only once the receiver has posted its recv,
gloo/transport/tcp/pair.cc). Messages whose waits are met go at once, and share the links
they cross (the replay decides how).
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import random
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Sequence

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


# ---- schedules ---------------------------------------------------------------------
@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    nbytes: int
    after: tuple[int, ...] = ()      # messages (indices) that must have arrived before this one goes
    step: int = 0                    # the algorithm's step or iteration (for people and tests)


@dataclass(frozen=True)
class Schedule:
    """The messages of one call of `algorithm` on n ranks with S = size bytes (the op's S,
    as nccl-tests counts it). `per_call`: the bench's time is the replay's time divided by
    it (pingpong: a round trip is two one-way times). `weight`: when a call may go several
    ways (`Algorithm.schedules`), this way's odds (relative to the others')."""
    algorithm: str
    n: int
    size: int
    messages: tuple[Message, ...]
    per_call: float = 1.0
    weight: float = 1.0

    def sent(self) -> list[int]:
        """Bytes each rank sends."""
        out = [0] * self.n
        for m in self.messages:
            out[m.src] += m.nbytes
        return out

    def received(self) -> list[int]:
        out = [0] * self.n
        for m in self.messages:
            out[m.dst] += m.nbytes
        return out

    def pair_bytes(self) -> dict[tuple[int, int], int]:
        """Bytes per direction between ranks (src, dst)."""
        out: dict[tuple[int, int], int] = {}
        for m in self.messages:
            out[(m.src, m.dst)] = out.get((m.src, m.dst), 0) + m.nbytes
        return out

    def counts(self) -> list[int]:
        """Messages each rank sends."""
        out = [0] * self.n
        for m in self.messages:
            out[m.src] += 1
        return out


class ScheduleTooLong(ValueError):
    """A call of more messages than `at_most` allows: not built (its replay would take too long)."""


_MOST: contextvars.ContextVar[int | None] = contextvars.ContextVar("most_messages", default=None)


@contextlib.contextmanager
def at_most(messages: int) -> Iterator[None]:
    """Schedules built inside stop at `messages` messages (ScheduleTooLong): the work a
    caller does grows with the size and world it is given (gloo's ring all_reduce cuts a
    buffer into 1 MiB segments: 1 TiB at 2 ranks is two million messages), and a reader of
    a run folder must not grow with a number a script printed."""
    token = _MOST.set(messages)
    try:
        yield
    finally:
        _MOST.reset(token)


class _Builder:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.most = _MOST.get()

    def add(self, src: int, dst: int, nbytes: int, after: Iterable[int | None] = (), step: int = 0) -> int:
        if self.most is not None and len(self.messages) >= self.most:
            raise ScheduleTooLong(f"more than {self.most:,} messages")
        deps = tuple(sorted({a for a in after if a is not None}))
        self.messages.append(Message(src, dst, max(0, int(nbytes)), deps, step))
        return len(self.messages) - 1

    def done(self, name: str, n: int, size: int, per_call: float = 1.0) -> Schedule:
        return Schedule(name, n, size, tuple(self.messages), per_call)


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length() if n > 1 else 0


class _Pipeline:
    """gloo's two-in-flight loops (allreduce.cc, reduce.cc, allgather.cc): at iteration i a
    rank first waits for its send and its recv of iteration i - 2, then posts iteration i's
    recv and send. So a message of iteration i goes once its sender and its receiver have
    both waited for theirs of i - 2 (the receiver's recv is posted only then). Before
    iteration 2 a rank has waited for `start[rank]` (what it waited for before the loop)."""

    def __init__(self, b: _Builder, n: int, recv_from: Callable[[int], int],
                 start: Sequence[Sequence[int | None]] | None = None, step0: int = 0) -> None:
        self.b, self.n, self.recv_from, self.step0 = b, n, recv_from, step0
        self.sends: dict[tuple[int, int], int] = {}
        self.start = start or [()] * n

    def _last(self, rank: int, upto: int) -> int | None:
        """Rank's latest send at an iteration <= upto (an empty segment sends nothing, and
        its wait is skipped with it)."""
        for i in range(upto, -1, -1):
            if (rank, i) in self.sends:
                return self.sends[(rank, i)]
        return None

    def waited(self, rank: int, i: int) -> list[int | None]:
        if i < 2:
            return list(self.start[rank])
        return [self._last(rank, i - 2), self._last(self.recv_from(rank), i - 2)]

    def send(self, src: int, dst: int, i: int, nbytes: int) -> None:
        if nbytes > 0:
            self.sends[(src, i)] = self.b.add(src, dst, nbytes, self.waited(src, i) + self.waited(dst, i),
                                              self.step0 + i)

    def end(self, rank: int, iterations: int) -> list[int | None]:
        """What `rank` has waited for once its loop of `iterations` send iterations is over
        (the loop's last two waits: iterations - 1 and - 2)."""
        return [self._last(rank, iterations - 1), self._last(self.recv_from(rank), iterations - 1),
                self._last(rank, iterations - 2), self._last(self.recv_from(rank), iterations - 2)]


# ---- gloo (torch 2.13, CPU) ------------------------------------------------------------
GLOO_MAX_SEGMENT = 1 << 20            # kMaxSegmentSize, gloo/allreduce.h and gloo/reduce.h


def gloo_ring_segments(n: int, size: int, itemsize: int) -> tuple[int, int, int]:
    """gloo/allreduce.cc ring(): (segments, segments per rank, bytes per segment)."""
    max_segment = itemsize * max(1, GLOO_MAX_SEGMENT // itemsize)
    segments = _round_up(max(_ceil_div(size, max_segment), 2 * n), n)
    return segments, segments // n, _round_up(_ceil_div(size, segments), itemsize)


def gloo_ring_allreduce(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """gloo/allreduce.cc ring(): the buffer cut into segments (at least 2 per rank, at most
    1 MiB); rank r sends to r - 1 and receives from r + 1, two segments in flight; a
    reduce-scatter of (segments - per rank) iterations, then an all-gather of as many."""
    b = _Builder()
    if n < 2 or size <= 0:
        return b.done("gloo.ring_allreduce", n, size)
    segments, per_rank, seg = gloo_ring_segments(n, size, itemsize)
    total, iterations = segments * seg, segments - per_rank
    right = lambda r: (r + 1) % n          # noqa: E731
    scatter = _Pipeline(b, n, right)
    for i in range(iterations):
        for r in range(n):
            offset = (((r + 1) * per_rank + i) * seg) % total
            scatter.send(r, (r - 1) % n, i, min(seg, size - offset))
    gather = _Pipeline(b, n, right, [scatter.end(r, iterations) for r in range(n)], step0=iterations)
    for i in range(iterations):
        for r in range(n):
            offset = ((r * per_rank + i) * seg) % total
            gather.send(r, (r - 1) % n, i, min(seg, size - offset))
    return b.done("gloo.ring_allreduce", n, size)


def gloo_allgather(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """gloo/allgather.cc: a ring (rank r sends to r + 1, receives from r - 1) that moves each
    rank's block (S / n) in two halves: 2(n - 1) messages per rank, two in flight."""
    b = _Builder()
    block = size // n if n else 0
    if n < 2 or block <= 0:
        return b.done("gloo.ring_allgather", n, size)
    halves = (block // 2, block - block // 2)
    ring = _Pipeline(b, n, lambda r: (r - 1) % n)
    for i in range(2 * (n - 1)):
        for r in range(n):
            ring.send(r, (r + 1) % n, i, halves[i & 1])
    return b.done("gloo.ring_allgather", n, size)


def binomial_broadcast(n: int, size: int, itemsize: int = 4, root: int = 0, name: str = "gloo.binomial_broadcast"
                       ) -> Schedule:
    """gloo/broadcast.cc: a binomial tree from the root; virtual rank v = (rank - root) mod n
    receives the whole buffer from v - 2^h (h: v's highest bit), then posts its sends to
    v + 2^j (j > h) all at once (a send is waited for only at the end)."""
    b = _Builder()
    if n < 2 or size <= 0:
        return b.done(name, n, size)
    real = lambda v: (v + root) % n          # noqa: E731
    into: dict[int, int] = {}
    dim = _ceil_log2(n)
    for v in range(n):                       # a parent's virtual rank is below its children's
        first = v.bit_length()               # v = 0: every bit; else the bits above v's highest
        for j in range(first, dim):
            child = v + (1 << j)
            if child < n:
                into[child] = b.add(real(v), real(child), size, [into.get(v)], step=j)
    return b.done(name, n, size)


def gloo_reduce(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """gloo/reduce.cc: the ring reduce-scatter of allreduce.cc (segments of S / 2n, at most
    1 MiB; segments - 2 iterations), then every rank sends its reduced chunk to the root,
    which has posted every recv at once."""
    b = _Builder()
    if n < 2 or size <= 0:
        return b.done("gloo.ring_reduce", n, size)
    max_segment = itemsize * (GLOO_MAX_SEGMENT // itemsize)
    seg = _round_up(min(_ceil_div(size, 2 * n), max_segment), itemsize)
    segments = _round_up(max(_ceil_div(size, seg), 2 * n), n)
    per_rank = segments // n
    total, chunk = segments * seg, per_rank * seg
    right = lambda r: (r + 1) % n            # noqa: E731
    ring = _Pipeline(b, n, right)
    for i in range(segments - 2):
        for r in range(n):
            offset = (((r + 1) * per_rank + i) * seg) % total
            ring.send(r, (r - 1) % n, i, min(seg, size - offset))
    root_done = ring.end(root, segments - 2)
    for r in range(n):
        if r != root:
            offset = r * chunk
            length = min(chunk, size - offset)
            if length > 0:
                b.add(r, root, length, ring.end(r, segments - 2) + root_done, step=segments - 2)
    return b.done("gloo.ring_reduce", n, size)


def all_at_once(n: int, size: int, itemsize: int = 4, root: int = 0, name: str = "gloo.alltoall") -> Schedule:
    """gloo/alltoall.cc (and NCCL's grouped sends): every rank posts its n - 1 sends of S / n
    at once, to r + 1, r + 2, ..., and every recv."""
    b = _Builder()
    block = size // n if n else 0
    if n < 2 or block <= 0:
        return b.done(name, n, size)
    for i in range(1, n):
        for r in range(n):
            b.add(r, (r + i) % n, block, step=i)
    return b.done(name, n, size)


# gloo's all_to_all, as the ranks enter it. Its tcp transport sends a message's data only once
# the receiver's "ready to receive" notice has arrived, and a rank's own notice goes out on
# the connection behind whatever data it is already sending there (gloo/transport/tcp/pair.cc:
# Pair::send, sendNotifyRecvReady). So the two directions of a pair run at once when both
# ranks enter within a notice's trip of each other, and one after the other otherwise: the
# later rank's data first (it found the earlier one's notice waiting), then the earlier
# rank's (its notice was behind that data). Measured (docs/network.md): at 2 nodes a call is
# one or the other, call by call; at 3 and 4 nodes a call is a mix. The replay cannot know
# how the ranks will enter, so it takes each pair to be together or one after the other
# with equal odds (PAIR_TOGETHER), the order of entry a random permutation, and averages.
PAIR_TOGETHER = 0.65


def gloo_alltoall_entered(n: int, size: int, order: Sequence[int], together: Iterable[tuple[int, int]],
                          itemsize: int = 4) -> Schedule:
    """gloo's all_to_all when the ranks enter in `order` (first to last) and the pairs in
    `together` (as (a, b), a < b) enter within a notice's trip of each other: their two
    directions at once; every other pair's later rank sends first, its earlier rank once that
    data has arrived."""
    b = _Builder()
    block = size // n if n else 0
    if n < 2 or block <= 0:
        return b.done("gloo.alltoall", n, size)
    entered = {rank: i for i, rank in enumerate(order)}
    close = {(min(a, c), max(a, c)) for a, c in together}
    first: dict[tuple[int, int], int] = {}
    for i in range(1, n):               # the sends that go at once, in gloo's posting order
        for r in range(n):
            d = (r + i) % n
            if (min(r, d), max(r, d)) in close or entered[r] > entered[d]:
                first[(r, d)] = b.add(r, d, block, step=i)
    for i in range(1, n):               # the earlier rank's, behind its peer's data
        for r in range(n):
            d = (r + i) % n
            if (r, d) not in first:
                b.add(r, d, block, after=[first[(d, r)]], step=i)
    return b.done("gloo.alltoall", n, size)


EXACT_RANKS = 4      # up to this many ranks every way is replayed, with its odds


def gloo_alltoall_variants(n: int, size: int, itemsize: int = 4, root: int = 0,
                           samples: int | None = None) -> tuple[Schedule, ...]:
    """The ways one call of gloo's all_to_all may go, each with its odds (`weight`; see
    PAIR_TOGETHER): every order of entry (equally likely) and every set of pairs that enter
    together (each pair with odds PAIR_TOGETHER), up to EXACT_RANKS ranks: 48 ways at 3
    ranks, 1,536 at 4, those that give the same messages merged. Above, `samples` draws
    (equal weights), seeded by n and size so that a prediction is the same every time: 64
    up to 8 ranks, 16 up to 16, 4 up to 32, one above (a replay of one draw at 64 ranks
    takes seconds; there the ways differ by a few per cent). Drawing at 3 and 4 ranks too
    (64 draws, as before 2026-11-27) made the mean move with the draw: 145 ms at 1 MiB
    and 160 ms per MiB at 4 MiB on the same 3-node links, where every way gives 152."""
    if n < 2 or size // n <= 0:
        return (all_at_once(n, size, itemsize, root),)
    pairs = [(a, c) for a in range(n) for c in range(a + 1, n)]
    if samples is None and n <= EXACT_RANKS:
        merged: dict[tuple, Schedule] = {}
        for order in itertools.permutations(range(n)):
            for mask in range(1 << len(pairs)):
                together = [q for k, q in enumerate(pairs) if mask >> k & 1]
                odds = PAIR_TOGETHER ** len(together) * (1 - PAIR_TOGETHER) ** (len(pairs) - len(together))
                way = gloo_alltoall_entered(n, size, order, together, itemsize)
                key = way.messages
                known = merged.get(key)
                merged[key] = replace(way, weight=odds + (known.weight if known else 0.0))
        return tuple(merged.values())
    count = samples if samples is not None else (64 if n <= 8 else 16 if n <= 16 else 4 if n <= 32 else 1)
    rng = random.Random(f"gloo.alltoall:{n}:{size}")
    out = []
    for _ in range(count):
        order = list(range(n))
        rng.shuffle(order)
        together = [q for q in pairs if rng.random() < PAIR_TOGETHER]
        out.append(gloo_alltoall_entered(n, size, order, together, itemsize))
    return tuple(out)


def pingpong(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """The bench's pingpong: rank 0 sends S to the last rank, which sends S back once it has
    it; the time is half the round trip."""
    b = _Builder()
    if n < 2:
        return b.done("pingpong", n, size, 2.0)
    there = b.add(0, n - 1, size, step=0)
    b.add(n - 1, 0, size, [there], step=1)
    return b.done("pingpong", n, size, 2.0)


def send_ring(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """The bench's ring (nccl-tests' sendrecv): every rank sends S to r + 1 while it receives
    S from r - 1, all at once."""
    b = _Builder()
    if n >= 2:
        for r in range(n):
            b.add(r, (r + 1) % n, size)
    return b.done("ring", n, size)


# ---- the textbook algorithms (NCCL on paper, the exercises) ----------------------------
def ring_steps(n: int, size: int, steps: int, name: str) -> Schedule:
    """A ring of `steps` steps, one chunk (S / n) per rank per step: rank r sends to r + 1
    what it received from r - 1 at the step before (reduce-scatter: n - 1 steps, all-gather:
    n - 1, all-reduce: both). Chunks are S split into n near-equal parts."""
    b = _Builder()
    if n < 2 or size <= 0:
        return b.done(name, n, size)
    chunks = [size // n + (1 if c < size % n else 0) for c in range(n)]
    prev: dict[int, int] = {}
    for k in range(steps):
        now = {}
        for r in range(n):
            chunk = chunks[(r - k) % n]
            if chunk:
                now[r] = b.add(r, (r + 1) % n, chunk, [prev.get((r - 1) % n), prev.get(r)], step=k)
        prev = now
    return b.done(name, n, size)


NCCL_SLICE = 512 << 10               # NCCL_BUFFSIZE (4 MiB) / NCCL_STEPS (8): one pipelined slice
MAX_SLICES = 64


def _slices(size: int) -> list[int]:
    count = max(1, min(MAX_SLICES, _ceil_div(size, NCCL_SLICE)))
    return [size // count + (1 if c < size % count else 0) for c in range(count)]


def chain(n: int, size: int, order: Sequence[int], name: str) -> Schedule:
    """A pipelined chain along `order` (broadcast from its first rank, or reduce into its
    last): S cut into slices of 512 KiB (at most 64), each passed on as soon as it arrived."""
    b = _Builder()
    if n < 2 or size <= 0:
        return b.done(name, n, size)
    last: dict[int, int] = {}                # edge -> its previous slice
    for c, piece in enumerate(_slices(size)):
        came = None
        for e in range(len(order) - 1):
            came = b.add(order[e], order[e + 1], piece, [came, last.get(e)], step=c)
            last[e] = came
    return b.done(name, n, size)


def nccl_ring_allreduce(n, size, itemsize=4, root=0):
    return ring_steps(n, size, 2 * (n - 1), "nccl.ring_allreduce")


def nccl_ring_allgather(n, size, itemsize=4, root=0):
    return ring_steps(n, size, n - 1, "nccl.ring_allgather")


def nccl_ring_reduce_scatter(n, size, itemsize=4, root=0):
    return ring_steps(n, size, n - 1, "nccl.ring_reduce_scatter")


def nccl_chain_broadcast(n, size, itemsize=4, root=0):
    return chain(n, size, [(root + i) % n for i in range(n)], "nccl.ring_broadcast")


def nccl_chain_reduce(n, size, itemsize=4, root=0):
    return chain(n, size, [(root + i) % n for i in range(n, 0, -1)], "nccl.ring_reduce")


def nccl_alltoall(n, size, itemsize=4, root=0):
    return all_at_once(n, size, itemsize, root, "nccl.alltoall")


def double_binary_tree(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """NCCL's tree all-reduce on paper: two binary trees (heap order; the second one the
    mirror image, so that one tree's inner ranks are the other's leaves), each
    carrying half of S in 512 KiB slices: a slice goes up to its parent once it arrived from
    every child, and down from the root to the leaves once the root has it."""
    b = _Builder()
    name = "nccl.double_binary_tree"
    if n < 2 or size <= 0:
        return b.done(name, n, size)
    for tree, half in enumerate((size - size // 2, size // 2)):
        if half <= 0:
            continue
        rank = (lambda p: p) if tree == 0 else (lambda p: n - 1 - p)     # position -> rank
        up_last: dict[int, int] = {}
        down_last: dict[int, int] = {}
        for c, piece in enumerate(_slices(half)):
            up: dict[int, int] = {}
            for p in range(n - 1, 0, -1):    # children before parents
                kids = [up.get(k) for k in (2 * p + 1, 2 * p + 2) if k < n]
                up[p] = b.add(rank(p), rank((p - 1) // 2), piece, kids + [up_last.get(p)], step=c)
                up_last[p] = up[p]
            at_root = [up.get(k) for k in (1, 2) if k < n]
            down: dict[int, int] = {}
            for p in range(1, n):            # parents before children
                came = down.get((p - 1) // 2) if p > 2 else None
                after = [came, down_last.get(p)] + (at_root if p <= 2 else [])
                down[p] = b.add(rank((p - 1) // 2), rank(p), piece, after, step=c)
                down_last[p] = down[p]
    return b.done(name, n, size)


def naive_allreduce(n: int, size: int, itemsize: int = 4, root: int = 0) -> Schedule:
    """Through rank 0: every rank sends S to it at once, it sends the sum back to each."""
    b = _Builder()
    if n < 2 or size <= 0:
        return b.done("p2p.naive_allreduce", n, size)
    up = [b.add(r, 0, size, step=0) for r in range(1, n)]
    for r in range(1, n):
        b.add(0, r, size, up, step=1)
    return b.done("p2p.naive_allreduce", n, size)


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
    dim = _ceil_log2(n)
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
              "NCCL's tree algorithm, on paper", "2 log2 n", "~2", lambda n: 2.0 * _ceil_log2(n),
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
              lambda n, rank, size, item: Traffic(_ceil_log2(n) * size * item if n > 1 else 0,
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
