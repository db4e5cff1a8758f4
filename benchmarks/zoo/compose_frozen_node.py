# zoo: culprit=1 op=all_reduce line=15 kind=timeout backend=compose nodes=2 nproc=1 timeout=90
# zoo: faults=stop-node:1@5+60 pg_timeout=10
# zoo: about=node 1 is frozen (docker pause) for 60 s; the others time out in all_reduce after pg_timeout
# zoo: source=https://github.com/NVIDIA/Megatron-LM/issues/1207
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
