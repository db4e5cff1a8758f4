"""Reference: all-to-all from isend/irecv. Tests only."""
import torch.distributed as dist


def all_to_all(output_list, input_list):
    rank, n = dist.get_rank(), dist.get_world_size()
    output_list[rank].copy_(input_list[rank])
    requests = []
    for step in range(1, n):
        to, frm = (rank + step) % n, (rank - step) % n
        requests.append(dist.isend(input_list[to], to))
        requests.append(dist.irecv(output_list[frm], frm))
    for r in requests:
        r.wait()
