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
differently). Forward only: the backward ring (dK, dV travelling back) is not here.
`variant`: all, or one of full, causal.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import _common, _patterns

VARIANTS = ("full", "causal")
TOLERANCE = 1e-5


def run(ctx: _common.Context, variant: str = "all", steps: int = 2, tokens: int = 32, heads: int = 2,
        head_dim: int = 8, seed: int = 0) -> None:
    n, me = ctx.world_size, ctx.rank
    block = tokens // n
    d = heads * head_dim
    g = torch.Generator().manual_seed(seed)
    qkv = [torch.randn(3, tokens, heads, head_dim, generator=g) for _ in range(steps)]
    for name in _patterns.variants(variant, VARIANTS):
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


def ring_attention(q, k, v, causal: bool):
    """This rank's queries against every rank's K/V block, the blocks passed around the ring."""
    n, me = dist.get_world_size(), dist.get_rank()
    scale = 1.0 / math.sqrt(q.shape[-1])
    kv = torch.stack([k, v]).contiguous()
    m = torch.full((q.shape[1], q.shape[0]), float("-inf"))      # running max per (head, query)
    l = torch.zeros(q.shape[1], q.shape[0])                       # running softmax denominator
    acc = torch.zeros_like(q)                                     # running weighted sum of values
    for hop in range(n):
        src = (me - hop) % n                                      # whose block this rank holds now
        if hop < n - 1:                                           # pass it on while computing
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
