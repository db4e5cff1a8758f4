"""Workload `collectives`: every collective of torch.distributed, checked against a known answer.

All ranks call the same collectives in the same order: that is the one rule
of collectives, and it is why a failed check here only records ok=False and
carries on (raising on one rank would leave the others waiting forever).

Inputs are small whole numbers in float32, so every answer is exact:

- reductions use `rank + 1` on every rank: SUM = n(n+1)/2, PRODUCT = n!,
  MIN = 1, MAX = n, AVG = (n+1)/2 (n = world size);
- data movement uses `unique(a, b)`, a block of values that differs for
  every (a, b) pair, so a block that lands in the wrong place is caught.

Rooted collectives (broadcast, scatter, gather, reduce) run once with every
rank as the root. Blocking calls return when this rank's part is done;
`async_op=True` returns a work handle to `wait()` on instead. The last part
runs an all_reduce on a subgroup made with `dist.new_group` (even ranks and
odd ranks): every rank must call `new_group` for every group, even for the
groups it is not in.

Every rank also records what it held before and after each call (`show`: a data
record named like the check, at most 16 values per tensor; ranks and roots below
DATA_RANKS), which the run's page lays out per rank, as the tutorials' figures do.
"""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist
from torch.torch_version import TorchVersion

from . import _common

OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}
# PRODUCT (n!) and AVG may round once n! no longer fits float32's 24-bit mantissa.
RTOL = {"PRODUCT": 1e-5, "AVG": 1e-6}
NUMEL = 3                            # elements per block
DATA_RANKS = 16                      # ranks (and roots) below this record what they held (Context.show)


def expected_reduction(op: str, n: int) -> float:
    """What reducing `rank + 1` over ranks 0..n-1 gives."""
    return {"SUM": n * (n + 1) / 2, "PRODUCT": float(math.factorial(n)),
            "MIN": 1.0, "MAX": float(n), "AVG": (n + 1) / 2}[op]


def unsupported(backend: str, what: str) -> str | None:
    """Why `backend` cannot run `what` (a ReduceOp name or a collective), or None.

    Decided by rule, not by trying: a collective that fails on one rank after
    the others have started it can leave them waiting until the timeout.
    Measured on gloo with torch 2.13 (CPU): every collective and ReduceOp used
    here works, AVG and list-form reduce_scatter included.
    """
    if backend == "gloo" and TorchVersion(torch.__version__) < (2, 8):
        # Both arrived in ProcessGroupGloo in 2025 (pytorch#149781, pytorch#149869).
        this = f"this is torch {torch.__version__}"
        if what == "AVG":
            return f"Cannot use ReduceOp.AVG with Gloo (gloo has AVG from torch 2.8; {this})"
        if what == "reduce_scatter":
            return f"ProcessGroupGloo does not support reduce_scatter (list form) before torch 2.8; {this}"
    if backend == "nccl" and what == "AVG" and torch.cuda.nccl.version() < (2, 10):
        return f"NCCL {torch.cuda.nccl.version()} has no ncclAvg (needs NCCL 2.10 or newer)"
    return None


def _tensor_form(new: str, old: str):
    """The single-tensor form of a collective: `*_single` in newer torch, `*_tensor` before."""
    return getattr(dist, new, None) or getattr(dist, old)


def unique(ctx: _common.Context, a: int, b: int) -> torch.Tensor:
    """NUMEL values that differ for every pair (a, b) of ranks: who sent it, and to whom."""
    start = (a * ctx.world_size + b) * NUMEL
    return torch.arange(start, start + NUMEL, dtype=torch.float32, device=ctx.device)


def blank(ctx: _common.Context) -> torch.Tensor:
    """A receive buffer filled with -1, a value no collective here produces."""
    return torch.full((NUMEL,), -1.0, device=ctx.device)


def show(ctx: _common.Context, call: str, op: str, before, after, root: int | None = None,
         **fields) -> None:
    """What this rank held before and after `call`, for the run's page (ranks and roots
    below DATA_RANKS: a figure of 64 ranks x 64 roots would help nobody)."""
    if ctx.rank >= DATA_RANKS or (root is not None and root >= DATA_RANKS):
        return
    ctx.show(call, op=op, before=_common.held(before), after=_common.held(after),
             **({"root": root} if root is not None else {}), **fields)


def run(ctx: _common.Context) -> None:
    rooted(ctx)
    reductions(ctx)
    everyone_to_everyone(ctx)

    started = time.perf_counter()
    dist.barrier()                   # returns on every rank once all ranks have entered it
    ctx.record("barrier", True, seconds=round(time.perf_counter() - started, 6), unit="s")
    show(ctx, "barrier", "barrier", None, None)

    async_ops(ctx)
    subgroup(ctx)


def rooted(ctx: _common.Context) -> None:
    """broadcast, scatter and gather, once with every rank as the root."""
    n, me = ctx.world_size, ctx.rank
    for root in range(n):
        # broadcast: the root's tensor overwrites everybody's.
        t = unique(ctx, root, root) if me == root else blank(ctx)
        before = t.clone()
        dist.broadcast(t, src=root)
        ctx.check(f"broadcast-root-{root}", t, unique(ctx, root, root))
        show(ctx, f"broadcast-root-{root}", "broadcast", before, t, root=root)

        # scatter: the root holds one block per rank; rank i receives block i.
        blocks = [unique(ctx, root, i) for i in range(n)] if me == root else None
        t = blank(ctx)
        dist.scatter(t, scatter_list=blocks, src=root)
        ctx.check(f"scatter-root-{root}", t, unique(ctx, root, me))
        show(ctx, f"scatter-root-{root}", "scatter", blocks, t, root=root)

        # gather: the opposite; only the root receives (and can check) anything.
        bucket = [blank(ctx) for _ in range(n)] if me == root else None
        mine = unique(ctx, me, root)
        dist.gather(mine, gather_list=bucket, dst=root)
        if me == root:
            ctx.check(f"gather-root-{root}", torch.stack(bucket),
                      torch.stack([unique(ctx, i, root) for i in range(n)]))
        show(ctx, f"gather-root-{root}", "gather", mine, bucket, root=root)


def reductions(ctx: _common.Context) -> None:
    """reduce (every root) and all_reduce with every ReduceOp this backend supports."""
    n, me = ctx.world_size, ctx.rank
    for name, op in OPS.items():
        why = unsupported(ctx.backend, name)
        if why:
            ctx.skip(f"all_reduce-{name}", why)
            for root in range(n):
                ctx.skip(f"reduce-{name}-root-{root}", why)
            continue
        want = torch.full((NUMEL,), expected_reduction(name, n))
        rtol = RTOL.get(name, 0.0)

        t = torch.full((NUMEL,), me + 1.0, device=ctx.device)
        before = t.clone()
        dist.all_reduce(t, op=op)
        ctx.check(f"all_reduce-{name}", t, want, rtol=rtol)
        show(ctx, f"all_reduce-{name}", "all_reduce", before, t, reduce_op=name)

        for root in range(n):
            t = torch.full((NUMEL,), me + 1.0, device=ctx.device)
            before = t.clone()
            dist.reduce(t, dst=root, op=op)
            # Only the root's tensor is defined afterwards (gloo leaves partial sums elsewhere).
            if me == root:
                ctx.check(f"reduce-{name}-root-{root}", t, want, rtol=rtol)
            show(ctx, f"reduce-{name}-root-{root}", "reduce", before, t if me == root else None,
                 root=root, reduce_op=name)


def everyone_to_everyone(ctx: _common.Context) -> None:
    """all_gather, all_to_all and reduce_scatter, in list form and single-tensor form."""
    n, me = ctx.world_size, ctx.rank
    # all_gather: everybody ends up with everybody's block, in rank order.
    everyone = torch.stack([unique(ctx, i, 0) for i in range(n)])
    out = [blank(ctx) for _ in range(n)]
    dist.all_gather(out, unique(ctx, me, 0))
    ctx.check("all_gather", torch.stack(out), everyone)
    show(ctx, "all_gather", "all_gather", unique(ctx, me, 0), out)
    out = torch.full((n * NUMEL,), -1.0, device=ctx.device)
    _tensor_form("all_gather_single", "all_gather_into_tensor")(out, unique(ctx, me, 0))
    ctx.check("all_gather-tensor", out, everyone.flatten())
    show(ctx, "all_gather-tensor", "all_gather_into_tensor", unique(ctx, me, 0), out)

    # all_to_all: rank `me` sends block unique(me, i) to rank i,
    # so it receives unique(i, me) from every rank i: a transpose.
    outgoing = [unique(ctx, me, i) for i in range(n)]
    incoming = [unique(ctx, i, me) for i in range(n)]
    why = unsupported(ctx.backend, "all_to_all")
    if why:
        ctx.skip("all_to_all", why)
    else:
        out = [blank(ctx) for _ in range(n)]
        dist.all_to_all(out, outgoing)
        ctx.check("all_to_all", torch.stack(out), torch.stack(incoming))
        show(ctx, "all_to_all", "all_to_all", outgoing, out)
    why = unsupported(ctx.backend, "all_to_all_single")
    if why:
        ctx.skip("all_to_all_single", why)
    else:
        out = torch.full((n * NUMEL,), -1.0, device=ctx.device)
        dist.all_to_all_single(out, torch.cat(outgoing))
        ctx.check("all_to_all_single", out, torch.cat(incoming))
        show(ctx, "all_to_all_single", "all_to_all_single", torch.cat(outgoing), out)

    # reduce_scatter: like all_to_all, then the incoming blocks are summed.
    why = unsupported(ctx.backend, "reduce_scatter")
    if why:
        ctx.skip("reduce_scatter", why)
    else:
        out = blank(ctx)
        dist.reduce_scatter(out, outgoing, op=dist.ReduceOp.SUM)
        ctx.check("reduce_scatter", out, sum(incoming))
        show(ctx, "reduce_scatter", "reduce_scatter", outgoing, out, reduce_op="SUM")
    out = blank(ctx)
    _tensor_form("reduce_scatter_single", "reduce_scatter_tensor")(
        out, torch.cat(outgoing), op=dist.ReduceOp.SUM)
    ctx.check("reduce_scatter-tensor", out, sum(incoming))
    show(ctx, "reduce_scatter-tensor", "reduce_scatter_tensor", torch.cat(outgoing), out, reduce_op="SUM")


def async_ops(ctx: _common.Context) -> None:
    """async_op=True returns at once with a work handle; the result is only valid after wait()."""
    n, me = ctx.world_size, ctx.rank
    t = torch.full((NUMEL,), me + 1.0, device=ctx.device)
    before = t.clone()
    work = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
    overlap = torch.ones(64, 64, device=ctx.device).sum()   # local work while the network is busy
    work.wait()
    ctx.check("all_reduce-async", t, torch.full((NUMEL,), expected_reduction("SUM", n)),
              overlapped_result=float(overlap))
    show(ctx, "all_reduce-async", "all_reduce", before, t, reduce_op="SUM", async_op=True)

    root = n - 1                     # the last rank, for variety
    t = torch.full((NUMEL,), float(root) if me == root else -1.0, device=ctx.device)
    before = t.clone()
    work = dist.broadcast(t, src=root, async_op=True)
    work.wait()
    ctx.check("broadcast-async", t, torch.full((NUMEL,), float(root)), root=root)
    show(ctx, "broadcast-async", "broadcast", before, t, root=root, async_op=True)


def subgroup(ctx: _common.Context) -> None:
    """all_reduce inside a group made with new_group: the even ranks, and the odd ranks."""
    n, me = ctx.world_size, ctx.rank
    members = {parity: list(range(parity, n, 2)) for parity in (0, 1)}
    groups = {}
    for parity, ranks in members.items():
        if ranks:                    # every rank calls new_group for every group, in the same order
            groups[parity] = dist.new_group(ranks)
    mine = me % 2
    t = ctx.tensor([me + 1.0])
    before = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=groups[mine])
    ctx.check("subgroup-all_reduce", t, [sum(r + 1.0 for r in members[mine])],
              group=members[mine], group_rank=dist.get_group_rank(groups[mine], me))
    show(ctx, "subgroup-all_reduce", "all_reduce", before, t, reduce_op="SUM", group=members[mine])


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("collectives")
