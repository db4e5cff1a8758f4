"""A DDP training step, timed with and without its gradient all_reduce (the lab's --script).

Run by benchmarks/ddp_link.py on every node of a compose lab (one rank per node):
an MLP of `--hidden` units (8.4 M parameters at 2048: 33.6 MB of float32 gradients)
trains on random data with DistributedDataParallel. `--steps` steps are timed as
DDP runs them (backward() all-reduces the gradients in buckets while it runs), and
as many inside `no_sync()` (no communication: the compute alone). The difference is
the communication the step could not hide; its share of the step is what a slower
link costs. Rank 0 emits one result line (workloads._common.emit).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from workloads._common import emit


def timed_steps(model, opt, x, y, steps: int, sync: bool) -> list[float]:
    times = []
    for _ in range(steps):
        dist.barrier()
        started = time.perf_counter()
        opt.zero_grad()
        if sync:
            nn.functional.mse_loss(model(x), y).backward()
        else:
            with model.no_sync():
                nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    h = args.hidden
    model = DDP(nn.Sequential(nn.Linear(h // 2, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                              nn.Linear(h, h // 2)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(args.batch, h // 2), torch.randn(args.batch, h // 2)
    timed_steps(model, opt, x, y, 2, sync=True)                # warm-up: buckets, connections
    synced = timed_steps(model, opt, x, y, args.steps, sync=True)
    alone = timed_steps(model, opt, x, y, args.steps, sync=False)
    slowest = torch.tensor([statistics.median(synced), statistics.median(alone)], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        params = sum(p.numel() for p in model.parameters())
        step, compute = slowest.tolist()
        emit({"workload": "ddp_step", "name": "step", "rank": 0, "ok": True,
              "world_size": dist.get_world_size(), "params": params, "grad_bytes": params * 4,
              "step_s_median": round(step, 6), "compute_s_median": round(compute, 6),
              "communication_share": round(max(0.0, step - compute) / step, 4), "steps": args.steps})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
