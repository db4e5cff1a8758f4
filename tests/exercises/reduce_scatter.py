"""Reference: ring reduce-scatter. Tests only."""
import torch.distributed as dist


def reduce_scatter(output, input_list):
    rank, n = dist.get_rank(), dist.get_world_size()
    left, right = (rank - 1) % n, (rank + 1) % n
    partial = input_list[(rank - 1) % n].clone()          # what I pass on first
    box = torch_empty = partial.clone()
    for step in range(n - 1):
        request = dist.isend(partial, right)
        dist.recv(box, left)
        request.wait()
        partial = box + input_list[(rank - step - 2) % n]
        box = torch_empty
    output.copy_(partial)
