# zoo: culprit=1 op=barrier line=13 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 1 adds a barrier (a debugging sync) the others do not call
# zoo: source=https://github.com/pytorch/pytorch/issues/54059
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(64)
for step in range(4):
    if rank == 1 and step == 2:
        dist.barrier()
    dist.all_reduce(t)
dist.destroy_process_group()
