"""Honest: column-parallel linear whose column blocks are padded to the widest
(ceil(d_out/n)) so every message has one size. Tests only: it passes, the padding allowed
as what equal blocks need."""
import torch
import torch.distributed as dist


def column_parallel_linear(x, weight, bias, out):
    rank, n = dist.get_rank(), dist.get_world_size()
    d_out = out.shape[1]
    widest = -(-d_out // n)
    widths = [d_out // n + (1 if j < d_out % n else 0) for j in range(n)]
    starts = [sum(widths[:j]) for j in range(n)]
    mine = torch.zeros(x.shape[0], widest, dtype=out.dtype)
    mine[:, :widths[rank]] = x @ weight + bias
    boxes = {j: torch.empty(x.shape[0], widest, dtype=out.dtype) for j in range(n) if j != rank}
    requests = [dist.irecv(box, j) for j, box in boxes.items()]
    requests += [dist.isend(mine, j) for j in range(n) if j != rank]
    for request in requests:
        request.wait()
    boxes[rank] = mine
    for j in range(n):
        out[:, starts[j]:starts[j] + widths[j]] = boxes[j][:, :widths[j]]
