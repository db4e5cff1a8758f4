# zoo: culprit=1 op=all_reduce line=15 kind=timeout backend=compose nodes=2 nproc=1 timeout=90
# zoo: faults=partition:1@5+60 pg_timeout=10
# zoo: about=node 1 is cut off the network for 60 s
# zoo: source=https://github.com/pytorch/pytorch/issues/118369
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import time

t = torch.ones(64)
for step in range(100000):
    dist.all_reduce(t)
    time.sleep(0.05)
dist.destroy_process_group()
