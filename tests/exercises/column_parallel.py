"""Reference: column-parallel linear. Each rank computes its columns of x @ W + b, then
sends them to every other rank and receives theirs (an all-gather of uneven column blocks,
from isend/irecv). Tests only."""
import torch
import torch.distributed as dist


def column_parallel_linear(x, weight, bias, out):
    rank, n = dist.get_rank(), dist.get_world_size()
    d_out = out.shape[1]
    widths = [d_out // n + (1 if j < d_out % n else 0) for j in range(n)]   # torch.tensor_split's blocks
    starts = [sum(widths[:j]) for j in range(n)]
    mine = (x @ weight + bias).contiguous()
    out[:, starts[rank]:starts[rank] + widths[rank]] = mine
    boxes = {j: torch.empty(x.shape[0], widths[j], dtype=out.dtype) for j in range(n) if j != rank and widths[j]}
    requests = [dist.irecv(box, j) for j, box in boxes.items()]
    if widths[rank]:
        requests += [dist.isend(mine, j) for j in range(n) if j != rank]
    for request in requests:
        request.wait()
    for j, box in boxes.items():
        out[:, starts[j]:starts[j] + widths[j]] = box
