# zoo: culprit=1 op=all_reduce line=11 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 runs a warm-up all_reduce before init_process_group (a helper at import time): torch raises that the default process group is not initialized
# zoo: source=https://github.com/open-mmlab/mmsegmentation/issues/901
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
if rank == 1:                             # the bug: a warm-up that runs too early on rank 1
    dist.all_reduce(torch.ones(4))
dist.init_process_group("gloo")
world = dist.get_world_size()
x = torch.ones(16)
dist.all_reduce(x)
dist.destroy_process_group()
