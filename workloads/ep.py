"""Workload `ep`: expert parallelism: a mixture-of-experts layer, one expert per rank.

Every rank holds `tokens` tokens of each step's batch and ONE expert (a small MLP). A
fixed router (a seeded d x n matrix, not trained: argmax of x R) sends each token to one
expert, so the ranks' shares differ. Each step, on every rank:

1. sort its tokens by expert and count them; exchange the counts with an
   `all_to_all_single` of n int64s, so each rank learns how many tokens it will receive
   from each other rank (the split sizes of the next call);
2. dispatch: `all_to_all_single` with uneven splits sends each token to its expert's rank;
3. the expert runs on what it received;
4. combine: the mirror `all_to_all_single` (the splits swapped) brings each answer back to
   the token's own rank, which puts them back in order.

The backward pass runs the combine's mirror again (each token's gradient to its expert);
the input is data, so no gradient goes back through the dispatch. Bytes per rank per step:
8 (n-1) + (2 s + c) d x 4, s the tokens this rank sends away and c those it receives
(from the counts, which every rank can work out: the data and the router are seeded).
Rank 0 trains every expert in ONE process on all ranks' tokens; each rank's expert and
the loss must agree within TOLERANCE (the gradient sums over tokens in another order).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import _common, _patterns

TOLERANCE = 1e-6


class AllToAll(torch.autograd.Function):
    """all_to_all_single with uneven splits; backward: the same with the splits swapped."""

    @staticmethod
    def forward(ctx, x, out_splits: list[int], in_splits: list[int]):
        ctx.splits = out_splits, in_splits
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits)
        return back, None, None


def run(ctx: _common.Context, steps: int = 3, tokens: int = 16, d: int = 16, hidden: int = 32,
        lr: float = 0.05, seed: int = 0) -> None:
    n, me = ctx.world_size, ctx.rank
    x, y = _patterns.data(steps * tokens * n, d, d, seed)
    router = torch.randn(d, n, generator=torch.Generator().manual_seed(seed + 1))
    whole = [(x[s * tokens * n:(s + 1) * tokens * n], y[s * tokens * n:(s + 1) * tokens * n]) for s in range(steps)]
    experts = [_patterns.mlp([d, hidden, d], seed + 2 + e) for e in range(n)]
    shapes = [p.detach() for e in experts for p in e.parameters()]
    ref = reference(experts, router, whole, lr) if me == 0 else None
    ref_params = _patterns.from_rank0(ref[0] if ref else None, shapes)
    ref_losses = [float(v) for v in _patterns.from_rank0([torch.tensor(ref[1])] if ref else None,
                                                         [torch.zeros(steps)])[0]]
    expert = _patterns.mlp([d, hidden, d], seed + 2 + me)
    opt = _patterns.SGD(expert.parameters(), lr)
    traffic = _patterns.Traffic()
    losses, formula, splits = [], [], []
    with traffic:
        for gx, gy in whole:
            traffic.step()
            counts = [[int(c) for c in torch.bincount(route(gx[i * tokens:(i + 1) * tokens], router), minlength=n)]
                      for i in range(n)]                          # counts[i][j]: rank i's tokens to expert j
            formula.append(_patterns.ep_bytes(me, counts, d))
            splits.append(counts[me])
            opt.zero_grad()
            mx, my = gx[me * tokens:(me + 1) * tokens], gy[me * tokens:(me + 1) * tokens]
            out = moe(mx, router, expert, n)
            loss = ((out - my) ** 2).sum() / gy.numel()           # this rank's share of the mean
            loss.backward()
            opt.step()
            losses.append(float(loss))
    params = [p.detach() for p in expert.parameters()]
    per = len(params)
    _patterns.matches(ctx, "moe", _patterns.global_losses(losses), ref_losses, params,
                      ref_params[me * per:(me + 1) * per], TOLERANCE, expert=me)
    _patterns.bytes_check(ctx, "moe", traffic, formula, "8 (n-1) + (2 s + c) d x 4 (s sent away, c received)",
                          send_splits=splits, ranks=n)


def route(x, router):
    """The fixed router: each token to one expert."""
    return (x @ router).argmax(-1)


def moe(x, router, expert, n):
    """Dispatch this rank's tokens to their experts, run ours, combine the answers."""
    chosen = route(x, router)
    order = torch.argsort(chosen, stable=True)
    send = torch.bincount(chosen, minlength=n)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)                            # the split sizes first
    send_splits, recv_splits = send.tolist(), recv.tolist()
    arrived = AllToAll.apply(x[order], recv_splits, send_splits)  # dispatch
    answers = AllToAll.apply(expert(arrived), send_splits, recv_splits)  # combine
    out = torch.empty_like(answers)
    out[order] = answers                                          # back in the tokens' order
    return out


def reference(experts, router, batches, lr):
    """ONE process: every expert, every token."""
    opt = _patterns.SGD([p for e in experts for p in e.parameters()], lr)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        chosen = route(x, router)
        out = torch.zeros_like(y)
        for e, expert in enumerate(experts):
            out = out.index_put((torch.nonzero(chosen == e).flatten(),), expert(x[chosen == e]))
        loss = ((out - y) ** 2).sum() / y.numel()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return [p.detach().clone() for e in experts for p in e.parameters()], losses


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("ep")
