"""Workload `cp`: context parallelism: ring attention by hand.

Each rank holds 1/n of the sequence: its block of queries, keys and values (T/n tokens,
`heads` heads of `head_dim`). Attention needs every query against every key, so the K/V
blocks travel the ring: at each of n hops a rank attends its queries to the K/V block it
holds, while it passes that block on to the next rank (isend) and takes the previous
rank's (irecv), the transfer overlapping the arithmetic. The softmax is merged online
(flash attention's running max m, denominator l and weighted sum): no rank ever holds
the whole T x T score matrix or the whole K/V. With `causal`, blocks from later ranks
are masked out entirely (they still pass through) and a rank's own block is masked
triangularly.

Bytes per rank per step: the K and V blocks, n-1 hops: 2 (n-1) (T/n) d x 4. Rank 0
computes full attention in ONE process on the whole sequence (softmax(Q K^T / sqrt(dh)) V)
and each rank's output block must agree within TOLERANCE (the online merge rounds
differently).

`train`: an attention layer (q, k, v and output projections, replicated) trained with
SGD on sequence shards: the same ring in forward, each hop through `RingPass`, whose
backward sends the K/V block's gradient back one hop, so dK and dV travel back around
the ring to the rank that owns the block; then each weight's gradient is all_reduced
(every rank saw only its tokens). 2 x 2 (n-1) (T/n) d x 4 + 2(n-1)/n P bytes per rank
per step. Checked against the same layer trained in ONE process on the whole sequence
(the loss and the weights; breaking the gradient's way back shows as a 1e-3 difference).
`variant`: all, or a comma list of full, causal, train.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import _common, _patterns

VARIANTS = ("full", "causal", "train")
TOLERANCE = 1e-5


def run(ctx: _common.Context, variant: str = "all", steps: int = 2, tokens: int = 32, heads: int = 2,
        head_dim: int = 8, lr: float = 0.1, seed: int = 0) -> None:
    n, me = ctx.world_size, ctx.rank
    block = tokens // n
    d = heads * head_dim
    g = torch.Generator().manual_seed(seed)
    qkv = [torch.randn(3, tokens, heads, head_dim, generator=g) for _ in range(steps)]
    for name in _patterns.variants(variant, VARIANTS):
        if name == "train":
            train(ctx, steps, tokens, heads, head_dim, seed, lr)
            continue
        causal = name == "causal"
        ref = [attention(*t, causal) for t in qkv] if me == 0 else None
        ref = _patterns.from_rank0(ref, [torch.empty(tokens, heads, head_dim)] * steps)
        traffic = _patterns.Traffic()
        outs = []
        with traffic:
            for t in qkv:
                traffic.step()
                q, k, v = (x[me * block:(me + 1) * block] for x in t)
                outs.append(ring_attention(q, k, v, causal))
        want = [r[me * block:(me + 1) * block] for r in ref]
        _patterns.matches(ctx, name, [], [], outs, want, TOLERANCE, block_tokens=block)
        _patterns.bytes_check(ctx, name, traffic, _patterns.cp_bytes(n, block, d),
                              f"2 (n-1) (T/n) d x 4 = 2 x {n - 1} x {block} x {d} x 4 B", block_tokens=block,
                              tokens=tokens, ranks=n)


def attention(q, k, v, causal: bool):
    """Full attention in one process: (tokens, heads, head_dim) in and out."""
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


class RingPass(torch.autograd.Function):
    """Forward: send a block to the next rank, take the previous rank's; backward: the
    block's gradient goes the other way, back towards the rank that owns the block."""

    @staticmethod
    def forward(ctx, x):
        return _shift(x, 1)

    @staticmethod
    def backward(ctx, grad):
        return _shift(grad, -1)


def _shift(x, step: int):
    n, me = dist.get_world_size(), dist.get_rank()
    out = torch.empty_like(x)
    works = [dist.isend(x.contiguous(), (me + step) % n), dist.irecv(out, (me - step) % n)]
    for w in works:
        w.wait()
    return out


class Attention(torch.nn.Module):
    """One attention layer (no biases): q, k, v and the output projection."""

    def __init__(self, d: int, heads: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)

    def forward(self, x, ring: bool = False):
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, -1)).unbind(1)
        o = ring_attention(q, k, v, False, differentiable=True) if ring else attention(q, k, v, False)
        return self.out(o.flatten(1))


def train(ctx, steps, tokens, heads, head_dim, seed, lr):
    """`train`: an attention layer trained on sequence shards, ring attention in forward
    and, through RingPass, the K/V gradients travelling back around the ring in backward;
    the replicated weights' gradients all_reduced (each rank saw only its tokens)."""
    n, me, d = ctx.world_size, ctx.rank, heads * head_dim
    block = tokens // n
    x, y = _patterns.data(steps * tokens, d, d, seed)
    batches = [(x[s * tokens:(s + 1) * tokens], y[s * tokens:(s + 1) * tokens]) for s in range(steps)]
    shapes = [p.detach() for p in Attention(d, heads, seed).parameters()]
    ref = None
    if me == 0:                                                   # ONE process, the whole sequence
        model = Attention(d, heads, seed)
        opt, ref_losses = _patterns.SGD(model.parameters(), lr), []
        for bx, by in batches:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(bx), by)
            loss.backward()
            opt.step()
            ref_losses.append(float(loss))
        ref = [p.detach() for p in model.parameters()], ref_losses
    ref_params = _patterns.from_rank0(ref[0] if ref else None, shapes)
    ref_losses = [float(v) for v in _patterns.from_rank0([torch.tensor(ref[1])] if ref else None,
                                                         [torch.zeros(steps)])[0]]
    model = Attention(d, heads, seed)
    opt, losses = _patterns.SGD(model.parameters(), lr), []
    traffic = _patterns.Traffic()
    with traffic:
        for bx, by in batches:
            traffic.step()
            opt.zero_grad()
            out = model(bx[me * block:(me + 1) * block], ring=True)
            loss = ((out - by[me * block:(me + 1) * block]) ** 2).sum() / by.numel()   # my tokens' share
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)                          # the weights are every rank's
            opt.step()
            losses.append(float(loss))
    params = [p.detach() for p in model.parameters()]
    _patterns.matches(ctx, "train", _patterns.global_losses(losses), ref_losses, params, ref_params, TOLERANCE,
                      block_tokens=block)
    p_bytes = sum(t.numel() * 4 for t in shapes)
    _patterns.bytes_check(ctx, "train", traffic, _patterns.cp_bytes(n, block, d, backward=True, param_bytes=p_bytes),
                          f"2 x 2 (n-1) (T/n) d x 4 + 2(n-1)/n P = 2 x 2 x {n - 1} x {block} x {d} x 4 B + "
                          f"2 x {n - 1}/{n} x {p_bytes} B", block_tokens=block, tokens=tokens, ranks=n,
                          param_bytes=p_bytes)


def ring_attention(q, k, v, causal: bool, differentiable: bool = False):
    """This rank's queries against every rank's K/V block, the blocks passed around the ring
    (`differentiable`: through RingPass, waiting for each block before computing with the
    one it holds, so that autograd can send the gradients back)."""
    n, me = dist.get_world_size(), dist.get_rank()
    scale = 1.0 / math.sqrt(q.shape[-1])
    kv = torch.stack([k, v]).contiguous()
    m = torch.full((q.shape[1], q.shape[0]), float("-inf"))      # running max per (head, query)
    l = torch.zeros(q.shape[1], q.shape[0])                       # running softmax denominator
    acc = torch.zeros_like(q)                                     # running weighted sum of values
    for hop in range(n):
        src = (me - hop) % n                                      # whose block this rank holds now
        works = []
        if differentiable and hop < n - 1:
            incoming = RingPass.apply(kv)
        elif hop < n - 1:                                         # pass it on while computing
            incoming = torch.empty_like(kv)
            works = [dist.isend(kv, (me + 1) % n), dist.irecv(incoming, (me - 1) % n)]
        if not (causal and src > me):
            s = torch.einsum("qhd,khd->hqk", q, kv[0]) * scale
            if causal and src == me:
                s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            fix = torch.exp(m - m_new)                            # rescale what was summed so far
            l = l * fix + p.sum(-1)
            acc = acc * fix.T[..., None] + torch.einsum("hqk,khd->qhd", p, kv[1])
            m = m_new
        if hop < n - 1:
            for w in works:
                w.wait()
            kv = incoming
    return acc / l.T[..., None]


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("cp")
