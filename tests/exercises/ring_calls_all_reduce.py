"""Classic mistake: the collective the exercise asks you to write, called. Tests only."""
import torch.distributed as dist


def allreduce(send, recv):
    recv.copy_(send)
    dist.all_reduce(recv)
