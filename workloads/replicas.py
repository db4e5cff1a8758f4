"""Workload `replicas`: process groups across independent torchrun jobs, met through one store.

A lab with `replicas: R` is R torchrun jobs of W workers each; each job has
its own rendezvous, its own default group and its own rank 0. What they share
is the replica store (REPLICA_STORE_ADDR:REPLICA_STORE_PORT), a TCPStore that
outlives every worker. This is the pattern behind HSDP's replica groups and
torchft: rank r of every replica joins one more group, "the ranks r across
replicas" (size R, group rank = REPLICA_ID), built from a `PrefixStore`
(one prefix per group, so the W groups share the store without sharing keys)
and `dist.ProcessGroupGloo(store, rank, size)`.

Checks, on every rank:

- cross-replica all_reduce and, at the same time, a within-replica all_reduce
  on the default group, each against its closed form (values that differ by
  replica and by rank, so a group that mixed up its members is caught);
- an HSDP-style training step loop: DDP inside each replica (gradients
  averaged over its W ranks while backward runs), then the gradient averaged
  across the R replicas on the cross group, then the optimizer step. The
  parameters must be identical on all R x W ranks and equal to one process
  training on the whole global batch (R x W slices).

With R = 1 there is no one to meet: the workload reports itself skipped.
Its report section is workloads/_report/replicas.py.
"""
from __future__ import annotations

import datetime
import os
import time

from . import _common
from ._protocol import Env

RTOL, ATOL = 1.3e-6, 5e-5       # distributed vs single-process parameters (as in ddp)


def run(ctx: _common.Context, steps: int = 5, batch_per_rank: int = 4, lr: float = 0.05,
        features: int = 8, hidden: int = 16, seed: int = 0, join_timeout: float = 120.0) -> None:
    if ctx.replica_num < 2:
        ctx.skip("replicas", f"REPLICA_NUM is {ctx.replica_num}: one replica has no cross-replica "
                             "group (run with --replicas 2)")
        return
    cross, seconds, where = join_cross_group(ctx, join_timeout)
    ctx.record("cross-replica-join", True, seconds=round(seconds, 6), unit="s", store=where,
               group=f"rank {ctx.rank} of every replica", group_rank=ctx.replica_id,
               group_size=ctx.replica_num)
    all_reduce_both_ways(ctx, cross)
    hsdp_steps(ctx, cross, steps, batch_per_rank, lr, features, hidden, seed)
    cross.barrier().wait()          # nobody closes its connections while others still use them


def join_cross_group(ctx: _common.Context, timeout_s: float):
    """This rank's group across replicas, from the replica store and a prefix of its own."""
    import torch.distributed as dist

    addr, port = os.environ["REPLICA_STORE_ADDR"], int(os.environ["REPLICA_STORE_PORT"])
    timeout = datetime.timedelta(seconds=timeout_s)
    started = time.perf_counter()
    store = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
    prefix = f"{os.environ.get(Env.RUN_ID, 'lab')}/cross-replica/rank-{ctx.rank}"
    group = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), ctx.replica_id, ctx.replica_num, timeout)
    return group, time.perf_counter() - started, f"{addr}:{port} prefix {prefix}"


def all_reduce_both_ways(ctx: _common.Context, cross) -> None:
    """Both all_reduces in flight at once: the two groups are independent."""
    import torch
    import torch.distributed as dist

    r, k, w, n = ctx.rank, ctx.replica_id, ctx.world_size, ctx.replica_num
    across = torch.full((3,), (k + 1) + 100.0 * r)             # on CPU: the cross group is gloo
    within = torch.full((3,), (r + 1) + 1000.0 * k, device=ctx.device)
    work_across = cross.allreduce([across])
    work_within = dist.all_reduce(within, async_op=True)
    work_across.wait()
    work_within.wait()
    ctx.check("cross-replica-all_reduce", across, torch.full((3,), n * (n + 1) / 2 + 100.0 * r * n),
              formula=f"sum over {n} replicas of (replica + 1) + 100 * rank")
    ctx.check("within-replica-all_reduce", within, torch.full((3,), w * (w + 1) / 2 + 1000.0 * k * w),
              formula=f"sum over {w} ranks of (rank + 1) + 1000 * replica")


def hsdp_steps(ctx: _common.Context, cross, steps: int, batch_per_rank: int, lr: float,
               features: int, hidden: int, seed: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from .ddp import flat_params, make_data, make_model, train

    w, n, b = ctx.world_size, ctx.replica_num, batch_per_rank
    slot = ctx.replica_id * w + ctx.rank                   # this rank's slice of every global batch
    total = n * w * b
    x, y = make_data(steps * total, features, seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    global_batches = [(x[s * total:(s + 1) * total], y[s * total:(s + 1) * total]) for s in range(steps)]
    local = [(gx[slot * b:(slot + 1) * b], gy[slot * b:(slot + 1) * b]) for gx, gy in global_batches]

    reference = make_model(features, hidden, seed, ctx.device)
    ref_losses = train(reference, global_batches, lr)
    ref = flat_params(reference)

    model = make_model(features, hidden, seed, ctx.device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)

    def average_across_replicas(_module) -> None:
        # DDP has averaged over this replica's ranks; now over the replicas.
        for p in model.parameters():
            if p.grad is not None:
                grad = p.grad.cpu() if p.grad.device.type != "cpu" else p.grad
                cross.allreduce([grad]).wait()
                grad /= n
                if grad is not p.grad:
                    p.grad.copy_(grad)

    started = time.perf_counter()
    losses = train(ddp, local, lr, after_backward=average_across_replicas)
    seconds = time.perf_counter() - started
    params = flat_params(model)

    hi, lo = params.clone(), params.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)              # within the replica ...
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    hi_c, lo_c = hi.cpu(), lo.cpu()
    cross.allreduce([hi_c], dist.ReduceOp.MAX).wait()      # ... then across replicas
    cross.allreduce([lo_c], dist.ReduceOp.MIN).wait()
    ctx.check("hsdp-params-identical-on-all-replicas-and-ranks", hi_c, lo_c,
              ranks=n * w, max_spread=float((hi_c - lo_c).abs().max()))
    ctx.check("hsdp-matches-single-process", params, ref, rtol=RTOL, atol=ATOL,
              max_abs_diff=float((params - ref).abs().max()))

    mean = torch.tensor(losses, dtype=torch.float32)
    dist.all_reduce(mean)
    cross.allreduce([mean]).wait()
    mean = [float(v) / (n * w) for v in mean]
    if not mean:
        ctx.skip("hsdp-loss-decreases", "steps=0: nothing was trained")
        return
    ctx.record("hsdp-loss-decreases", mean[-1] < mean[0], first_loss=mean[0], last_loss=mean[-1],
               unit="MSE")
    ctx.check("hsdp-loss-matches-single-process", mean, ref_losses, rtol=1e-5, atol=1e-6)
    ctx.record("hsdp-step-time", True, value=seconds / max(steps, 1), unit="s/step")


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("replicas")
