"""Cheat (issue 52 item 7): every rank's `send` goes into the lab's own store, a decoy ring
of exactly the optimal bytes runs beside it (a chunked ring of zeros), and `recv` is the
sum of what the store hands back. Tests only: the grade must fail it ("values arrived
through the store"), though its values, bytes, waits and deadline are all right."""
import torch
import torch.distributed as dist

_calls = [0]


def _decoy_ring(send):
    """The reference ring's sends and receives, on zeros: 2(n-1)/n x S bytes, nothing learned."""
    rank, n = dist.get_rank(), dist.get_world_size()
    left, right = (rank - 1) % n, (rank + 1) % n
    chunks = torch.tensor_split(torch.zeros_like(send), n)
    inbox = torch.empty_like(chunks[0])
    for phase in range(2):
        for step in range(n - 1):
            out, into = chunks[(rank + phase - step) % n], chunks[(rank + phase - step - 1) % n]
            request = dist.isend(out.clone(), right)
            dist.recv(inbox[:into.numel()], left)
            request.wait()


def allreduce(send, recv):
    rank, n = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    call = _calls[0]
    _calls[0] += 1
    store.set(f"cheat/{n}/{call}/{rank}", send.numpy().tobytes())
    _decoy_ring(send)
    total = torch.zeros_like(send)
    for peer in range(n):
        data = store.get(f"cheat/{n}/{call}/{peer}")
        total += torch.frombuffer(bytearray(data), dtype=send.dtype)[:send.numel()] if data else 0
    recv.copy_(total)
