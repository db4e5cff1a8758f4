"""Bad input: a function that raises on one rank. Tests only."""
import torch.distributed as dist


def allreduce(send, recv):
    if dist.get_rank() == 1:
        raise ValueError("rank 1 gives up")
    recv.copy_(send)
    dist.recv(recv, 1)
