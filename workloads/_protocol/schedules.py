"""The collectives' message schedules: what one call of each algorithm sends, to whom,
and when (gloo's, read from its source; nccl's and the textbook's, on paper). The
registry that says which runs for which op and family is algorithms.py's. Standard
library only.

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
import random
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Sequence

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


def ceil_log2(n: int) -> int:
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
    dim = ceil_log2(n)
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
