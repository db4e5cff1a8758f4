# zoo: culprit=0 op=monitored_barrier line=20|14 kind=mismatch nproc=3 timeout=40
# zoo: about=a debugging switch read from rank 0's environment only turns its end-of-epoch barrier into monitored_barrier; the others call barrier, which does not answer monitored_barrier's send/recv, and rank 0 reports them as stuck
# zoo: source=https://github.com/pytorch/pytorch/pull/55197
import os
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 0:
    os.environ["DEBUG_HANGS"] = "1"           # set by hand on the node where rank 0 runs


def sync(tag):
    print(f"rank {rank}: end of {tag}")
    if os.environ.get("DEBUG_HANGS") == "1":
        dist.monitored_barrier(timeout=timedelta(seconds=10), wait_all_ranks=True)
    else:
        dist.barrier()


grad = torch.ones(64)
for epoch in range(2):
    for step in range(3):
        dist.all_reduce(grad)
    sync(f"epoch {epoch}")
dist.destroy_process_group()
