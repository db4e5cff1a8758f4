"""Workload `fsdp`: sharded data parallelism, with FSDP2 (`fully_shard`) and ZeRO-1 by hand.

A small MLP trains with Adam on a synthetic regression set that every rank generates
from one seed; each rank takes its own slice of each step's global batch. Two variants
(`variant`: fsdp2, zero1, or all):

- fsdp2: `torch.distributed.fsdp.fully_shard` on every Linear, then on the model. Each
  rank keeps 1/n of every parameter (and of Adam's state); before a layer runs, FSDP2
  all_gathers its parameters (forward, and again in backward: they were resharded after
  forward), and reduce_scatters (averages) its gradients, so each rank gets the average
  of its own shard's gradient. Bytes per rank per step: 3 (n-1)/n P.
- zero1: by hand. Every rank holds the whole model but Adam's state of only 1/n of the
  flat parameter vector: reduce_scatter the flat gradient (each rank gets the sum of its
  shard, / n), Adam on the shard, all_gather the updated shards. 2 (n-1)/n P: what DDP's
  all_reduce sends, with 1/n of the optimizer's memory.

Rank 0 also trains the same model in ONE process on each whole global batch (the
reference); the trained parameters and the loss per step must agree within TOLERANCE
(the sums happen in another order, so not bitwise), and each rank's bytes per step must
be the formula's within 1 % (workloads/_patterns.py counts what torch issued).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import _common, _patterns

VARIANTS = ("fsdp2", "zero1")
TOLERANCE = 1e-5


def run(ctx: _common.Context, variant: str = "all", steps: int = 3, batch_per_rank: int = 4,
        d: int = 16, hidden: int = 32, lr: float = 0.01, seed: int = 0) -> None:
    n, me, b = ctx.world_size, ctx.rank, batch_per_rank
    dims = [d, hidden, hidden, d]
    x, y = _patterns.data(steps * b * n, d, d, seed)
    whole = [(x[s * b * n:(s + 1) * b * n], y[s * b * n:(s + 1) * b * n]) for s in range(steps)]
    mine = [(gx[me * b:(me + 1) * b], gy[me * b:(me + 1) * b]) for gx, gy in whole]

    shapes = [p.detach() for p in _patterns.mlp(dims, seed).parameters()]
    ref = reference(dims, seed, whole, lr) if me == 0 else None
    ref_params = _patterns.from_rank0(ref[0] if ref else None, shapes)
    ref_losses = [float(v) for v in _patterns.from_rank0([torch.tensor(ref[1])] if ref else None,
                                                         [torch.zeros(steps)])[0]]
    param_bytes = sum(p.numel() * 4 for p in shapes)
    # FSDP2 cuts every parameter along dim 0 into n equal shards, the last ones padded
    sharded_bytes = sum(-(-p.shape[0] // n) * n * (p.numel() // p.shape[0]) * 4 for p in shapes)
    for name in _patterns.variants(variant, VARIANTS):
        traffic = _patterns.Traffic()
        if name == "fsdp2":
            params, losses, state = fsdp2(dims, seed, mine, lr, traffic)
            formula = _patterns.fsdp2_bytes(sharded_bytes, n)
            text = f"3 (n-1)/n P = 3 x {n - 1}/{n} x {sharded_bytes} B" + (
                " (each parameter's dim 0 padded to a multiple of n)" if sharded_bytes != param_bytes else "")
        else:
            params, losses, state, padded = zero1(dims, seed, mine, lr, traffic, n, me)
            formula = _patterns.zero1_bytes(padded, n)
            text = f"2 (n-1)/n P = 2 x {n - 1}/{n} x {padded} B (P padded to a multiple of n)"
        _patterns.matches(ctx, name, _patterns.global_losses(losses, n), ref_losses, params, ref_params,
                          TOLERANCE)
        _patterns.bytes_check(ctx, name, traffic, formula, text, param_bytes=param_bytes, ranks=n,
                              optimizer_state_bytes=state, optimizer_state_unsharded=2 * param_bytes)


def reference(dims, seed, batches, lr):
    """ONE process: the whole global batch at every step."""
    model = _patterns.mlp(dims, seed)
    losses = _patterns.train_steps(model, torch.optim.Adam(model.parameters(), lr=lr), batches)
    return [p.detach().clone() for p in model.parameters()], losses


def fsdp2(dims, seed, batches, lr, traffic):
    from torch.distributed.fsdp import fully_shard

    model = _patterns.mlp(dims, seed)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, reshard_after_forward=True)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = _patterns.train_steps(model, opt, batches, traffic)
    state = sum(v.to_local().numel() * 4 for s in opt.state.values() for v in s.values()
                if isinstance(v, torch.Tensor) and v.dim())
    return [p.full_tensor() for p in model.parameters()], losses, state


def zero1(dims, seed, batches, lr, traffic, n, me):
    model = _patterns.mlp(dims, seed)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    shard = -(-numel // n)
    flat = torch.zeros(shard * n)
    flat[:numel] = torch.nn.utils.parameters_to_vector(params).detach()
    owned = flat[me * shard:(me + 1) * shard].clone().requires_grad_()   # the shard Adam updates
    opt = torch.optim.Adam([owned], lr=lr)
    losses = []
    with traffic:
        for x, y in batches:
            traffic.step()
            model.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            grad = torch.zeros(shard * n)
            grad[:numel] = torch.cat([p.grad.flatten() for p in params])
            mine = torch.empty(shard)
            dist.reduce_scatter_tensor(mine, grad)          # the sum of my shard over ranks
            owned.grad = mine / n
            opt.step()
            full = torch.empty(shard * n)
            dist.all_gather_into_tensor(full, owned.detach())
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(full[:numel], params)
            losses.append(float(loss))
    state = sum(v.numel() * 4 for s in opt.state.values() for v in s.values() if v.dim())
    return [p.detach() for p in params], losses, state, shard * n * 4


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("fsdp")
