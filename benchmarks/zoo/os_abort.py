# zoo: culprit=2 op=all_reduce line=16|17 kind=abort nproc=3 timeout=30
# zoo: about=rank 2 aborts (os.abort, as a failed native assertion does) between two all_reduces: SIGABRT, no Python traceback
# zoo: source=https://github.com/pytorch/pytorch/issues/126544 (a rank terminated with exitcode -6)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import os

x = torch.ones(16)
for step in range(4):
    if rank == 2 and step == 1:
        os.abort()                        # the bug: a fatal check
    dist.all_reduce(x)
dist.destroy_process_group()
