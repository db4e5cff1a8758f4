"""The numbers nccl-tests reports, as pure functions (no torch).

Shared by the `bench` workload (which runs inside every node, where only the
`workloads` package is guaranteed) and `workloads._report.bench` (which re-exports them
for reports and tests). Definitions follow nccl-tests' doc/PERFORMANCE.md; the ops and
their busbw factors are declared with their algorithms in workloads/_protocol/algorithms.py:

- time: one call of the operation; the slowest rank's time per iteration;
- algbw = S / t, S the operation's size in bytes, GB/s = 1e9 bytes/s;
- busbw = algbw * factor(op, n), the factor making busbw comparable with the
  link's peak whatever the number of ranks n.

For all_gather and reduce_scatter S is the *total* array (per-rank count x
n x element size), as in nccl-tests; for all_to_all S is one rank's send
buffer. For p2p the time is one way (ping-pong round trip / 2).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from ._protocol.algorithms import BLOCKED, COLLECTIVES, OPS, P2P, busbw_factor  # noqa: F401  (declared once there)

GB = 1e9


def algbw_GBps(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth S/t in GB/s (1e9 bytes per second); 0 for a zero time."""
    return size_bytes / seconds / GB if seconds > 0 else 0.0


def busbw_GBps(op: str, size_bytes: float, seconds: float, n: int) -> float:
    return algbw_GBps(size_bytes, seconds) * busbw_factor(op, n)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median_quantiles(n: int, level: float = 0.95) -> tuple[float, float]:
    """(q_lo, q_hi): the median of n draws from any distribution F falls between F's q_lo
    and q_hi quantiles with probability `level`, whatever F is: the median is below F's q
    quantile when at least half the draws are, P(Bin(n, q) >= ceil(n/2)) (exact to n = 200,
    the normal approximation above)."""
    if n < 1:
        raise ValueError(f"median_quantiles: expected n >= 1 draws, given {n}")
    tail = (1.0 - level) / 2

    def at_least(k: int, q: float) -> float:
        if n > 200:
            z = (k - 0.5 - n * q) / math.sqrt(n * q * (1 - q))
            return 0.5 * math.erfc(z / math.sqrt(2))
        return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k, n + 1))

    def at_least_half_below(q: float) -> float:
        if n % 2:                               # the middle draw
            return at_least((n + 1) // 2, q)
        # the mean of the two middle draws: below x when both are (n/2 + 1 draws below),
        # never unless the lower one is (n/2): taken half way
        return (at_least(n // 2, q) + at_least(n // 2 + 1, q)) / 2

    lo, hi = 0.0, 0.5
    for _ in range(60):                     # grows with q: bisect for the q where it is `tail`
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at_least_half_below(mid) < tail else (lo, mid)
    return lo, 1.0 - lo


def median_band(times: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The distribution-free band of the median of the distribution `times` were drawn from:
    [x_(j), x_(n+1-j)] of the sorted times, j the largest whose band holds the median with
    probability `level` or more (1 - 2 P(Bin(n, 1/2) < j); at least the extremes: below 6
    times no band reaches 95 %)."""
    xs = sorted(times)
    n = len(xs)
    if n == 0:
        raise ValueError("median_band of no times")
    j, below = 1, 0.0
    while j < (n + 1) // 2:
        below += math.comb(n, j - 1) / 2 ** n          # P(Bin(n, 1/2) <= j - 1)
        if n > 1000 or 1 - 2 * (below + math.comb(n, j) / 2 ** n) < level:
            break
        j += 1
    if n > 1000:                                       # the normal approximation
        j = max(1, int(n / 2 - 1.96 * math.sqrt(n) / 2))
    return xs[j - 1], xs[n - j]


SPREAD_MIN_TIMES = 6


def same_lab_spread(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """How far apart, as a ratio B/A, the medians of two runs of the same lab fall, from each
    run's own iteration times: each median's `median_band`, their widths combined as two
    independent errors are (in quadrature, on a log scale: the ratio is B's error over A's).
    (low, high): 93 to 95 % of such ratios fall inside (simulated on lognormal times: 95 % at
    10 times a run, 93-94 % at 40 to 2,000). None with fewer than SPREAD_MIN_TIMES times in a run (below 6 no
    band of the median reaches 95 %: it would call too much noise) or a time not above 0."""
    bands = []
    for times in (a, b):
        if len(times) < SPREAD_MIN_TIMES or not min(times) > 0:
            return None
        low, high = median_band(times, level)
        middle = percentile(times, 50)
        bands.append((math.log(middle / low), math.log(high / middle)))
    (a_down, a_up), (b_down, b_up) = bands
    return math.exp(-math.hypot(b_down, a_up)), math.exp(math.hypot(b_up, a_down))


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' -b/-e/-f sweep: min_bytes, min_bytes*factor, ... up to max_bytes."""
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def validate_sweep(min_bytes, max_bytes, factor, iters, warmup_iters) -> None:
    """One clear line for a sweep that cannot run (raised on every rank alike)."""
    def whole(name, value, lo):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"bench: {name}: expected an integer >= {lo}, given {value!r} "
                             f"(example: min_bytes: 1024, max_bytes: 1048576, factor: 4)")
    whole("min_bytes", min_bytes, 1)
    whole("max_bytes", max_bytes, 1)
    whole("factor", factor, 2)
    whole("iters", iters, 1)
    whole("warmup_iters", warmup_iters, 0)
    if max_bytes < min_bytes:
        raise ValueError(f"bench: max_bytes ({max_bytes}) is smaller than min_bytes ({min_bytes})")


def element_count(op: str, size_bytes: int, element_size: int, n: int) -> int:
    """Elements in S: size / element size, rounded down to a multiple of n for blocked ops."""
    count = size_bytes // element_size
    if op in BLOCKED:
        count = (count // n) * n
    return count


def summarize(op: str, count: int, element_size: int, n: int,
              per_iter_max_s: Iterable[float]) -> dict[str, float]:
    """Median/p99 time and bandwidths for one (op, size) from the slowest rank's times.

    For p2p ops the times passed in are round trips (pingpong) or one ring step;
    pingpong's one-way time is half the round trip.
    """
    times = list(per_iter_max_s)
    if op == "pingpong":
        times = [t / 2 for t in times]
    size = count * element_size
    median, p99 = percentile(times, 50), percentile(times, 99)
    return {
        "size_bytes": size,
        "time_us_median": round(median * 1e6, 3),
        "time_us_p99": round(p99 * 1e6, 3),
        "algbw_GBps": round(algbw_GBps(size, median), 6),
        "busbw_GBps": round(busbw_GBps(op, size, median, n), 6),
    }
