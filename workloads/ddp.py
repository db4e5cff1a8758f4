"""Workload `ddp`: data-parallel training, by hand and with DistributedDataParallel.

A tiny MLP learns a noisy linear function (y = X w + noise) from a synthetic
data set that every rank generates identically from a fixed seed; at every
step each rank takes its own slice of the global batch (batch_per_rank rows).
The model is trained three times from the same initial weights:

- reference: ONE process (this rank, no communication) trains on the whole
  global batch of each step;
- manual: each rank trains on its slice and, between backward() and step(),
  calls `average_gradients`: all_reduce(SUM) every gradient, divide by the
  world size. Every rank then applies the same averaged gradient;
- ddp: `torch.nn.parallel.DistributedDataParallel` does that averaging for
  us, bucketing gradients and all-reducing them while backward() runs.

Because the mean of equal-sized slice losses is the global-batch loss, the
averaged gradient IS the global-batch gradient: both distributed runs must end
with parameters identical on every rank and equal to the reference (up to
float rounding, since the sums happen in a different order), and the loss
must go down.

Each rank also records, per run, its own slice's loss at every step, the averaged loss,
and the first values of its parameters with their sum (`Context.show`, at most
DATA_STEPS steps), so the run's page can draw the loss per rank per step and show that
the replicas agree.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import _common

RTOL, ATOL = 1.3e-6, 5e-5            # distributed vs single-process parameters
DATA_STEPS = 500                     # losses recorded per run at most (every k-th step beyond)


def make_data(rows: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same synthetic regression data set on every rank: y = X @ w_true + 0.1 * noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=g)
    w_true = torch.randn(features, 1, generator=g)
    y = x @ w_true + 0.1 * torch.randn(rows, 1, generator=g)
    return x, y


def make_model(features: int, hidden: int, seed: int, device) -> nn.Module:
    """A fresh model; the seed makes the initial weights the same on every rank and every call."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1)).to(device)


def average_gradients(model: nn.Module) -> None:
    """The heart of data parallelism: make every rank's gradient the mean over all ranks."""
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size


def train(model: nn.Module, batches, lr: float, after_backward=None) -> list[float]:
    """Plain SGD over `batches`; returns the loss of every step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if after_backward is not None:
            after_backward(model)       # manual data parallelism: sync gradients here
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()] if losses else []


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def run(ctx: _common.Context, steps: int = 20, batch_per_rank: int = 8, lr: float = 0.05,
        features: int = 8, hidden: int = 16, seed: int = 0) -> None:
    n, b = ctx.world_size, batch_per_rank
    x, y = make_data(steps * b * n, features, seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    # Step s uses rows [s*b*n, (s+1)*b*n) as the global batch; this rank's slice is its b rows.
    global_batches = [(x[s * b * n:(s + 1) * b * n], y[s * b * n:(s + 1) * b * n]) for s in range(steps)]
    local_batches = [(gx[ctx.rank * b:(ctx.rank + 1) * b], gy[ctx.rank * b:(ctx.rank + 1) * b])
                     for gx, gy in global_batches]

    reference = make_model(features, hidden, seed, ctx.device)
    ref_losses = train(reference, global_batches, lr)
    ref_params = flat_params(reference)

    # (a) Synchronous SGD with hand-written gradient averaging.
    manual = make_model(features, hidden, seed, ctx.device)
    started = time.perf_counter()
    losses = train(manual, local_batches, lr, after_backward=average_gradients)
    report(ctx, "manual", manual, losses, ref_params, ref_losses, time.perf_counter() - started, steps)

    # (b) The same with DistributedDataParallel (device_ids only for a GPU module).
    model = make_model(features, hidden, seed, ctx.device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    started = time.perf_counter()
    losses = train(ddp, local_batches, lr)
    report(ctx, "ddp", model, losses, ref_params, ref_losses, time.perf_counter() - started, steps)


def report(ctx: _common.Context, kind: str, model: nn.Module, local_losses: list[float],
           ref_params: torch.Tensor, ref_losses: list[float], seconds: float, steps: int) -> None:
    """Checks and measurements for one distributed run (`kind` is "manual" or "ddp")."""
    params = flat_params(model)

    # Identical on every rank: the elementwise MAX and MIN over ranks must both equal our copy.
    hi, lo = params.clone(), params.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    spread = float((hi - lo).abs().max()) if params.numel() else 0.0
    ctx.check(f"{kind}-params-identical-on-all-ranks", hi, lo, max_spread=spread)

    ctx.check(f"{kind}-matches-single-process", params, ref_params, rtol=RTOL, atol=ATOL,
              max_abs_diff=float((params - ref_params).abs().max()))

    # Each rank saw only its slice; the mean of the slice losses is the global-batch loss.
    losses = torch.tensor(local_losses, dtype=torch.float32, device=ctx.device)
    dist.all_reduce(losses, op=dist.ReduceOp.SUM)
    losses = [float(v) / ctx.world_size for v in losses.cpu()]
    every = max(1, -(-len(losses) // DATA_STEPS))
    ctx.show(f"{kind}-training", op="train", run=kind, every=every, steps=len(losses),
             local_loss=_common.numbers(local_losses[::every]), mean_loss=_common.numbers(losses[::every]),
             reference_loss=_common.numbers(ref_losses[::every]) if ctx.rank == 0 else None,
             params=_common.held(params), param_sum=float(params.double().sum()), max_spread=spread)
    if not losses:
        ctx.skip(f"{kind}-loss-decreases", "steps=0: nothing was trained")
        return
    ctx.record(f"{kind}-loss-decreases", losses[-1] < losses[0],
               first_loss=losses[0], last_loss=losses[-1], unit="MSE")
    ctx.check(f"{kind}-loss-matches-single-process", losses, ref_losses, rtol=1e-5, atol=1e-6)
    ctx.record(f"{kind}-final-loss", _common.finite(losses[-1]), value=losses[-1], unit="MSE")
    ctx.record(f"{kind}-step-time", True, value=seconds / steps, unit="s/step")


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("ddp")
