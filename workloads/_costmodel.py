"""The α–β (latency–bandwidth) closed form of each bench op, its fit and its predictions.

Pure functions (no torch), shared by the bench report hook (workloads/_report/bench.py)
and benchmarks. `labctl predict` no longer scales these: it replays each algorithm's own
messages over the lab's links (workloads/_protocol/replay.py); this closed form is the
summary of the same algorithms on uniform links, what the report's "Cost model" table fits.

A message of S bytes over n ranks costs

    t(S, n) = steps(n) * α + factor(n) * S / B

α: the cost of one message on the way (latency, software included); B: the
bandwidth of one rank's link; steps(n): messages that must follow one another;
factor(n): bytes that cross the busiest link per byte of S.

The algorithms, their steps(n) and factor(n) are declared once, with their messages, in
workloads/_protocol/algorithms.py (`MODELS` below reads them): `nccl`, the algorithms
nccl-tests' doc/PERFORMANCE.md reasons with (factor(n) is exactly the busbw factor, so
busbw tends to B); `gloo`, what gloo runs for torch 2.13 on CPU, read from gloo's source:

    op              gloo's algorithm                               steps(n)     factor(n)
    all_reduce      ring, segments <= 1 MiB, two in flight         2(n-1)       2(n-1)/n
    all_gather      ring, each block in two halves                 n-1          (n-1)/n
    reduce_scatter  an all_reduce of the whole buffer, each rank keeps its block
                                                                   2(n-1)       2(n-1)/n
    broadcast       binomial tree, a rank's sends all at once      floor(log2 n) 1, 2, 3 at n = 2, 3, 4; 6 at 8
    reduce          ring reduce-scatter, then every chunk to the root
                                                                   n            2(n-1)/n
    all_to_all      every send at once                             1            (n-1)/n
    pingpong, ring  one message                                    1            1

`tests/test_replay.py` checks that the replay of each algorithm's messages on uniform links
gives these factors and steps.

The fit is least squares on t = A + C * S with weights 1/t, then α = A / steps(n),
B = factor(n) / C. Sizes span decades: unweighted, the largest sizes decide alone
and α is lost; weighted 1/t^2 (relative errors), the smallest and noisiest size
decides (on 2 shared cores a 64 KiB message may take 0.5 or 10 ms). 1/t sits
between (benchmarks/netmodel.py's errors were lowest with it). A negative A
(noise, or a sweep with no small sizes) is fitted as A = 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from ._protocol import algorithms as registry
from ._protocol.links import human_size
from ._protocol.algorithms import Algorithm  # noqa: F401  (the registry's: op, name, steps, factor)

MODELS: dict[str, dict[str, Algorithm]] = {
    family: {op: registry.ALGORITHMS[key] for op, key in ops.items()}
    for family, ops in registry.DEFAULTS.items()}


def model_for(dist_backend: str | None) -> dict[str, Algorithm]:
    """The algorithms of a run's backend: gloo's (read from its source), nccl-tests' for the rest."""
    return MODELS[registry.family_for(dist_backend)]


@dataclass(frozen=True)
class Fit:
    """α (seconds), B (bytes/s) of one op at world size n, and how well the line fits."""
    algorithm: Algorithm
    n: int
    alpha_s: float
    bandwidth_Bps: float
    rms_error: float            # root mean square of (model - measured) / measured
    max_error: float            # the largest |(model - measured) / measured|
    points: int

    @property
    def op(self) -> str:
        return self.algorithm.op

    def at(self, n: int, size: float) -> "Prediction":
        """What this fit expects of its op at world size n and S = size bytes."""
        return predict(self.algorithm, self.alpha_s, self.bandwidth_Bps, n, size)


@dataclass(frozen=True)
class Prediction:
    algorithm: Algorithm
    n: int
    size: float
    alpha_term_s: float          # steps(n) * α
    beta_term_s: float           # factor(n) * S / B

    @property
    def seconds(self) -> float:
        return self.alpha_term_s + self.beta_term_s

    @property
    def dominant(self) -> str:
        """Which term the time is mostly made of: latency (α) or bandwidth (β)."""
        return "latency (α)" if self.alpha_term_s > self.beta_term_s else "bandwidth (β)"

    def busbw_Bps(self, busbw_factor: float) -> float:
        """busbw as nccl-tests reports it (its own factor for the op), from this time."""
        return busbw_factor * self.size / self.seconds if self.seconds > 0 else 0.0


def predict(algo: Algorithm, alpha_s: float, bandwidth_Bps: float, n: int, size: float) -> Prediction:
    """t(S, n) of `algo` from α and B (see the module's tables)."""
    beta = algo.factor(n) * size / bandwidth_Bps if bandwidth_Bps > 0 else math.inf
    return Prediction(algo, n, size, algo.steps(n) * alpha_s, beta)


def fit(algo: Algorithm, n: int, points: Iterable[tuple[float, float]]) -> Fit | None:
    """α and B of `algo` at world size n from (size bytes, seconds) points; None when the
    points cannot make a line (fewer than two sizes, or time not growing with size)."""
    pts = [(float(s), float(t)) for s, t in points if t > 0]
    if len({s for s, _ in pts}) < 2:
        return None
    w = [1.0 / t for _, t in pts]
    sw = sum(w)
    sx = sum(wi * s for wi, (s, _) in zip(w, pts))
    sy = sum(wi * t for wi, (_, t) in zip(w, pts))
    sxx = sum(wi * s * s for wi, (s, _) in zip(w, pts))
    sxy = sum(wi * s * t for wi, (s, t) in zip(w, pts))
    det = sw * sxx - sx * sx
    a = (sy * sxx - sx * sxy) / det if det else -1.0
    c = (sw * sxy - sx * sy) / det if det else 0.0
    if a < 0:                              # no latency left once noise is fitted: through 0
        a, c = 0.0, sxy / sxx
    if c <= 0:
        return None
    errors = [(a + c * s - t) / t for s, t in pts]
    return Fit(algo, n, a / algo.steps(n), algo.factor(n) / c,
               math.sqrt(sum(e * e for e in errors) / len(errors)), max(abs(e) for e in errors), len(pts))


def why_not(points: Iterable[tuple[float, float]]) -> str:
    """Why `fit` made no line of these (size bytes, seconds) points, in their own numbers."""
    pts = sorted((float(s), float(t)) for s, t in points if t > 0)
    sizes = sorted({s for s, _ in pts})
    if len(sizes) < 2:
        return f"{len(sizes)} size{'' if len(sizes) == 1 else 's'} with a time: a line needs two or more"
    shown = ", ".join(f"{human_size(s)} {t * 1e6:,.0f} µs" for s, t in pts)
    return (f"its time does not grow with the size ({shown}): noise larger than what the bytes cost "
            "(a loaded machine, the recorder in small ops)")


def unfitted(rows: Sequence[dict], model: dict[str, Algorithm]) -> dict[str, str]:
    """The ops of `rows` that `fits` leaves out, and why (one line each)."""
    by_op: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("time_us_median") is None or not r.get("world_size"):
            continue
        by_op.setdefault(r["op"], []).append((r["size_bytes"], r["time_us_median"] / 1e6))
    found = fits(rows, model)
    out = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        if op in found:
            continue
        if op not in model:
            out[op] = "no model of its algorithm"
        elif op not in by_op:
            out[op] = "no row with a time and a world size"
        else:
            out[op] = why_not(by_op[op])
    return out


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    return (predicted - measured) / measured


def fits(rows: Sequence[dict], model: dict[str, Algorithm]) -> dict[str, Fit]:
    """One fit per op from bench rows (op, size_bytes, time_us_median, world_size)."""
    by_op: dict[str, list[tuple[float, float]]] = {}
    n_of: dict[str, int] = {}
    for r in rows:
        if r.get("time_us_median") is None or not r.get("world_size"):
            continue
        by_op.setdefault(r["op"], []).append((r["size_bytes"], r["time_us_median"] / 1e6))
        n_of[r["op"]] = int(r["world_size"])
    out = {}
    for op, pts in by_op.items():
        found = fit(model[op], n_of[op], pts) if op in model else None
        if found is not None:
            out[op] = found
    return out
