"""Same-run A/B: the bench workload's timing path vs a bare all_reduce loop, interleaved.

Runs inside one lab (`labctl up --script benchmarks/overhead_ab.py -- ...`),
so both sides share the process group, the processes and the moment: round
by round, size by size, in alternating order (A,B then B,A) so that drift in
the machine's load falls on both. Rank 0 prints one line:
    AB {"<size>": {"lab": [seconds per round], "bare": [...]}, ...}
"""
import argparse
import json
import statistics

import torch

from bare_allreduce import bare_median      # the very loop the separate-launch comparison runs
from workloads import _common, bench

parser = argparse.ArgumentParser()
parser.add_argument("sizes", type=int, nargs="+", help="bytes (float32)")
parser.add_argument("--iters", type=int, default=10)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()

ctx = _common.init()


def lab_side(size: int) -> float:
    """Exactly what the bench workload times: correctness pass, warm-up, timed loop, MAX."""
    case = bench.Case(ctx, "all_reduce", size // 4, torch.float32)
    times, wrong = bench.measure(ctx, case, args.warmup, args.iters)
    assert wrong == 0, f"{wrong} wrong elements"
    return statistics.median(times)


def bare_side(size: int) -> float:
    return bare_median(size, args.iters, args.warmup)


found = {str(s): {"lab": [], "bare": []} for s in args.sizes}
for rnd in range(args.rounds):
    for size in args.sizes:
        order = (("lab", lab_side), ("bare", bare_side))
        for name, side in (order if rnd % 2 == 0 else order[::-1]):
            found[str(size)][name].append(side(size))
if ctx.rank == 0:
    print("AB " + json.dumps(found), flush=True)
_common.shutdown()
