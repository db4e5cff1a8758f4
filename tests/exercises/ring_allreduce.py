"""Reference: chunked ring all-reduce (reduce-scatter, then all-gather). Tests only."""
import torch
import torch.distributed as dist


def allreduce(send, recv):
    rank, n = dist.get_rank(), dist.get_world_size()
    left, right = (rank - 1) % n, (rank + 1) % n
    recv.copy_(send)
    chunks = torch.tensor_split(recv, n)          # views of recv: exactly n, some maybe empty
    inbox = torch.empty_like(chunks[0])
    for step in range(n - 1):                     # reduce-scatter: chunk (rank - step) goes right
        out, into = chunks[(rank - step) % n], chunks[(rank - step - 1) % n]
        request = dist.isend(out.clone(), right)
        box = inbox[:into.numel()]
        dist.recv(box, left)
        into += box
        request.wait()
    for step in range(n - 1):                     # all-gather: the finished chunk goes right
        out, into = chunks[(rank + 1 - step) % n], chunks[(rank - step) % n]
        request = dist.isend(out.clone(), right)
        box = inbox[:into.numel()]
        dist.recv(box, left)
        into.copy_(box)
        request.wait()
