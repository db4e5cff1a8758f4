# zoo: culprit=2 op=all_reduce line=15 kind=exception nproc=3 timeout=30
# zoo: about=rank 2 runs out of address space (RLIMIT_AS) allocating an activation
# zoo: source=https://github.com/pytorch/pytorch/issues/17113
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import resource

dist.all_reduce(torch.ones(4))
if rank == 2:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    act = torch.empty(8 << 30, dtype=torch.uint8)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
