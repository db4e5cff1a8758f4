"""A bare torch.distributed all_reduce timing loop: the reference for harness overhead.

Same timing method as the bench workload (barrier, time one call, slowest
rank per iteration, median), none of its machinery (no correctness pass,
no result records, no labctl imports). Rank 0 prints one JSON line:
    BARE {"<size>": median_seconds, ...}

    torchrun ... benchmarks/bare_allreduce.py SIZE [SIZE...] --iters 10 --warmup 3
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist



def bare_median(size: int, iters: int, warmup: int) -> float:
    """Median over iterations of the slowest rank's time for one all_reduce of `size` bytes."""
    t = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    times = []
    for _ in range(iters):
        dist.barrier()
        started = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - started)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return statistics.median(slowest.tolist())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=int, nargs="+", help="bytes (float32)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    medians = {str(size): bare_median(size, args.iters, args.warmup) for size in args.sizes}
    if dist.get_rank() == 0:
        print("BARE " + json.dumps(medians), flush=True)
    dist.destroy_process_group()
