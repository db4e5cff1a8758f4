# zoo: culprit=2 op=all_reduce|barrier line=14|16 kind=mismatch nproc=3 timeout=30
# zoo: about=ranks 0 and 1 call a functional all_reduce that rank 2 skips
# zoo: source=https://github.com/pytorch/pytorch/pull/155558 (one rank skips a compiler collective the others run)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import torch.distributed._functional_collectives as funcol

t = torch.ones(16)
if rank != 2:
    t = funcol.all_reduce(t, "sum", dist.group.WORLD)
    print(t.sum().item())
dist.barrier()
dist.destroy_process_group()
