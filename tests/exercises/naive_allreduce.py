"""Reference: all-reduce through rank 0. Tests only."""
import torch.distributed as dist


def allreduce(send, recv):
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        recv.copy_(send)
        box = send.clone()
        for peer in range(1, n):
            dist.recv(box, peer)
            recv += box
        requests = [dist.isend(recv, peer) for peer in range(1, n)]
        for r in requests:
            r.wait()
    else:
        dist.send(send, 0)
        dist.recv(recv, 0)
