# zoo: culprit=0 op=all_reduce line=14 kind=deadlock nproc=4 timeout=30
# zoo: about=rank 0 reduces in its subgroup [0, 1] before the world all_reduce; the others the other way round
# zoo: source=https://github.com/NVIDIA/apex/pull/18
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

sub = dist.new_group([0, 1])
t = torch.ones(16)
dist.all_reduce(t)
if rank == 0:
    dist.all_reduce(t, group=sub)
    dist.all_reduce(t)
else:
    dist.all_reduce(t)
    if rank == 1:
        dist.all_reduce(t, group=sub)
dist.destroy_process_group()
