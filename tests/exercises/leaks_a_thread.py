"""Bad input: a right all-to-all that leaves a thread running (not a daemon) behind, so
the rank cannot end after its last call. Tests only: the lab's deadline must fail it."""
import threading
import time

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
    threading.Thread(target=time.sleep, args=(10**6,)).start()
