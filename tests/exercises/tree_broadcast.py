"""Reference: binomial-tree broadcast. Tests only."""
import torch.distributed as dist


def broadcast(tensor, src):
    rank, n = dist.get_rank(), dist.get_world_size()
    me = (rank - src) % n                         # my place in a tree rooted at 0
    mask = 1
    while mask < n:                               # receive once, from the parent
        if me & mask:
            dist.recv(tensor, (me - mask + src) % n)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:                               # then send to the children, farthest first
        if me + mask < n:
            dist.send(tensor, (me + mask + src) % n)
        mask >>= 1
