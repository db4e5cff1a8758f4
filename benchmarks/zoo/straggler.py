# zoo: culprit=2 op=all_reduce line=15|16 kind=straggler nproc=3 timeout=60
# zoo: about=rank 2 sleeps 0.3 s before each of 16 all_reduces; the run passes
# zoo: source=https://github.com/horovod/horovod/issues/867
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import time

t = torch.ones(16)
for step in range(16):
    if rank == 2:
        time.sleep(0.3)
    dist.all_reduce(t)
dist.destroy_process_group()
