"""Workload `tp`: tensor parallelism, by hand and with torch.distributed.tensor.parallel.

The model is `blocks` residual MLP blocks (x + w2 gelu(w1 x): a transformer block's
feed-forward half). Over n ranks, w1 is column-parallel (each rank holds hidden/n of its
rows and bias: its slice of the hidden units, no communication) and w2 row-parallel (the
matching hidden/n columns: each rank's product is a partial sum of the output), so:

- manual: Megatron's two functions by hand (workloads/_patterns.py): g, an all_reduce of
  the partial sums after w2 (forward), and f, an all_reduce of the input's gradient before
  w1 (backward; the first block's input is data and needs none): (2L-1) 2(n-1)/n A bytes
  per rank per step, A the activation's bytes (all tokens x d x 4);
- dtensor: the same with `parallelize_module` on a DeviceMesh (ColwiseParallel on w1,
  RowwiseParallel on w2): DTensor issues the same all_reduces;
- manual-sp, dtensor-sp: sequence parallelism: between blocks each rank holds 1/n of the
  tokens; all_gather them before w1 and reduce_scatter after w2 instead of all_reduce (the
  same bytes forward), their mirror images in backward: (4L-1) (n-1)/n A, with activations
  between blocks 1/n the size (dtensor-sp: ColwiseParallel(input_layouts=Shard(0)),
  RowwiseParallel(output_layouts=Shard(0))).

Every rank trains with SGD on the same tokens; rank 0 trains the whole model in ONE
process (the reference), and each rank's shards of the trained weights and the loss per
step must agree within TOLERANCE (the row-parallel sums add in another order).
`variant`: all, or a comma list of manual, dtensor, manual-sp, dtensor-sp.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import _common, _patterns

VARIANTS = ("manual", "dtensor", "manual-sp", "dtensor-sp")
TOLERANCE = 1e-5


def run(ctx: _common.Context, variant: str = "all", steps: int = 3, tokens: int = 16, d: int = 16,
        hidden: int = 64, blocks: int = 2, lr: float = 0.05, seed: int = 0) -> None:
    n = ctx.world_size
    names = _patterns.variants(variant, VARIANTS)
    x, y = _patterns.data(steps * tokens, d, d, seed)
    batches = [(x[s * tokens:(s + 1) * tokens], y[s * tokens:(s + 1) * tokens]) for s in range(steps)]
    shapes = [p.detach() for p in _patterns.blocks(blocks, d, hidden, seed).parameters()]
    ref = _patterns.blocks_reference(blocks, d, hidden, seed, batches, lr) if ctx.rank == 0 else None
    ref_params = _patterns.from_rank0(ref[0] if ref else None, shapes)
    ref_losses = [float(v) for v in _patterns.from_rank0([torch.tensor(ref[1])] if ref else None,
                                                         [torch.zeros(steps)])[0]]
    ref_shards = _patterns.tp_shards(ref_params, dist.group.WORLD)
    act = tokens * d * 4
    for name in names:
        sequence = name.endswith("-sp")
        traffic = _patterns.Traffic()
        build = dtensor_model if name.startswith("dtensor") else manual_model
        model = build(blocks, d, hidden, seed, sequence)
        losses = train(model, batches, lr, traffic, sequence)
        if sequence:      # each rank's loss is its tokens' share of the mean
            losses = _patterns.global_losses(losses)
        params = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
        _patterns.matches(ctx, name, losses, ref_losses, params, ref_shards, TOLERANCE)
        text = (f"(4L-1) (n-1)/n A = {4 * blocks - 1} x {n - 1}/{n} x {act} B" if sequence
                else f"(2L-1) 2(n-1)/n A = {2 * blocks - 1} x 2 x {n - 1}/{n} x {act} B")
        _patterns.bytes_check(ctx, name, traffic, _patterns.tp_bytes(act, n, blocks, sequence), text,
                              activation_bytes=act, blocks=blocks, ranks=n)


def manual_model(count, d, hidden, seed, sequence):
    return _patterns.tp_manual(count, d, hidden, seed, dist.group.WORLD, sequence)


def dtensor_model(count, d, hidden, seed, sequence):
    from torch.distributed.device_mesh import init_device_mesh

    return _patterns.tp_dtensor(count, d, hidden, seed, init_device_mesh("cpu", (dist.get_world_size(),)), sequence)


def train(model, batches, lr, traffic, sequence):
    """SGD; sequence parallel: this rank's tokens only, its loss their share of the mean."""
    opt = _patterns.SGD(model.parameters(), lr)
    n, me = dist.get_world_size(), dist.get_rank()
    losses = []
    with traffic:
        for x, y in batches:
            traffic.step()
            opt.zero_grad()
            if sequence:
                out = model(x.chunk(n, 0)[me])
                loss = ((out - y.chunk(n, 0)[me]) ** 2).sum() / y.numel()
            else:
                loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return losses


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("tp")
