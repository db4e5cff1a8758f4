"""Workload `mesh`: a 2-D device mesh, data parallel x tensor parallel.

`init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))` lays the n = dp x tp
ranks out as a grid: each row (the same dp index) is a tensor-parallel group, each column
a data-parallel group. The model is `blocks` residual MLP blocks split over the tp group
(w1 column-parallel, w2 row-parallel: by hand, `manual`, or with ColwiseParallel /
RowwiseParallel on `mesh["tp"]`, `dtensor`); each dp replica trains on its own slice of
the global batch, and after backward every rank averages its parameter shard's gradients
over its dp group (an all_reduce on `mesh.get_group("dp")`: the shards that hold the same
slice of the model).

Bytes per rank per step: the tensor-parallel all_reduces, (2L-1) 2(tp-1)/tp A (A the
replica's activation bytes: its tokens x d x 4), plus the dp all_reduce of the shard's
gradients, 2(dp-1)/dp P/tp. Rank 0 trains the whole model in ONE process on each whole
global batch; each rank's shards and the loss must agree within TOLERANCE.
`variant`: all, or one of manual, dtensor; `tp`: the tensor-parallel size (dp = n / tp).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import _common, _patterns

VARIANTS = ("manual", "dtensor")
TOLERANCE = 1e-5


def run(ctx: _common.Context, variant: str = "all", tp: int = 2, steps: int = 3, tokens: int = 8, d: int = 16,
        hidden: int = 64, blocks: int = 2, lr: float = 0.05, seed: int = 0) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    n = ctx.world_size
    names = _patterns.variants(variant, VARIANTS)
    if n % tp:
        for name in names:
            ctx.record(f"{name}-matches-single-process", False, detail=f"tp={tp} does not divide {n} ranks")
        return
    dp = n // tp
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh.get_group("tp"), mesh.get_group("dp")
    replica = mesh.get_local_rank("dp")
    rows = tokens * dp
    x, y = _patterns.data(steps * rows, d, d, seed)
    whole = [(x[s * rows:(s + 1) * rows], y[s * rows:(s + 1) * rows]) for s in range(steps)]
    mine = [(gx[replica * tokens:(replica + 1) * tokens], gy[replica * tokens:(replica + 1) * tokens])
            for gx, gy in whole]
    shapes = [p.detach() for p in _patterns.blocks(blocks, d, hidden, seed).parameters()]
    ref = _patterns.blocks_reference(blocks, d, hidden, seed, whole, lr) if ctx.rank == 0 else None
    ref_params = _patterns.from_rank0(ref[0] if ref else None, shapes)
    ref_losses = [float(v) for v in _patterns.from_rank0([torch.tensor(ref[1])] if ref else None,
                                                         [torch.zeros(steps)])[0]]
    want = _patterns.tp_shards(ref_params, tp_group)
    for name in names:
        model = (_patterns.tp_dtensor(blocks, d, hidden, seed, mesh["tp"]) if name == "dtensor"
                 else _patterns.tp_manual(blocks, d, hidden, seed, tp_group))
        params = list(model.parameters())
        local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
        opt = _patterns.SGD(params, lr)
        traffic = _patterns.Traffic()
        def average() -> None:                        # data parallel: average over the replicas
            for p in params:
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                dist.all_reduce(g, group=dp_group)
                g /= dp

        losses = _patterns.train_steps(model, opt, mine, traffic, average)
        shard_bytes = sum(t.numel() * 4 for t in local)
        act = tokens * d * 4
        # each replica's loss is its tokens' mean: the global loss is their mean (every tp rank
        # holds its replica's: / n counts each replica tp times)
        _patterns.matches(ctx, name, _patterns.global_losses(losses, n), ref_losses,
                          local, want, TOLERANCE,
                          dp=dp, tp=tp, replica=replica)
        _patterns.bytes_check(ctx, name, traffic, _patterns.mesh_bytes(act, dp, tp, blocks, shard_bytes),
                              f"(2L-1) 2(tp-1)/tp A + 2(dp-1)/dp P/tp = {2 * blocks - 1} x 2 x {tp - 1}/{tp} x "
                              f"{act} B + 2 x {dp - 1}/{dp} x {shard_bytes} B", dp=dp, tp=tp,
                              activation_bytes=act, shard_param_bytes=shard_bytes,
                              mesh=[[r * tp + c for c in range(tp)] for r in range(dp)])


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("mesh")
