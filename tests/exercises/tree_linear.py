"""Classic mistake: a "broadcast" where src sends to every rank itself (right values,
n-1 sends from one rank where a binomial tree needs ceil(log2 n)). Tests only."""
import torch.distributed as dist


def broadcast(tensor, src):
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == src:
        for peer in range(n):
            if peer != src:
                dist.send(tensor, peer)
    else:
        dist.recv(tensor, src)
