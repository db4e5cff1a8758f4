# zoo: culprit=2 op=all_reduce line=15|16 kind=exit nproc=3 timeout=30
# zoo: about=rank 2 calls os._exit(3) between two all_reduces: no traceback
# zoo: source=https://github.com/facebookresearch/fairseq/issues/810
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import os

t = torch.ones(16)
for step in range(4):
    if rank == 2 and step == 2:
        os._exit(3)
    dist.all_reduce(t)
dist.destroy_process_group()
