"""Classic mistake: a chunked ring with blocking sends, every rank sending first (each
send waits for a receiver that is itself sending: a deadlock on gloo). Tests only."""
import torch
import torch.distributed as dist


def allreduce(send, recv):
    rank, n = dist.get_rank(), dist.get_world_size()
    left, right = (rank - 1) % n, (rank + 1) % n
    recv.copy_(send)
    chunks = torch.tensor_split(recv, n)
    for step in range(n - 1):
        out, into = chunks[(rank - step) % n], chunks[(rank - step - 1) % n]
        dist.send(out.clone(), right)
        box = torch.empty_like(into)
        dist.recv(box, left)
        into += box
    for step in range(n - 1):
        out, into = chunks[(rank + 1 - step) % n], chunks[(rank - step) % n]
        dist.send(out.clone(), right)
        dist.recv(into, left)
