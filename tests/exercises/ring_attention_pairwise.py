"""Classic mistake: K/V sent straight to every rank instead of round the ring. The same
bytes and the right values, but every rank talks to every other (a ring hands each block
on, one neighbour to the next). Tests only: the schedule check must fail it."""
import math

import torch
import torch.distributed as dist


def ring_attention(q, k, v, out):
    rank, n = dist.get_rank(), dist.get_world_size()
    mine = torch.stack([k, v])
    blocks = {rank: mine}
    requests = []
    for peer in range(n):
        if peer != rank:
            blocks[peer] = torch.empty_like(mine)
            requests += [dist.isend(mine, peer), dist.irecv(blocks[peer], peer)]
    for request in requests:
        request.wait()
    keys = torch.cat([blocks[j][0] for j in range(n)])
    values = torch.cat([blocks[j][1] for j in range(n)])
    out.copy_(torch.softmax(q @ keys.T / math.sqrt(q.shape[-1]), dim=-1) @ values)
