# zoo: culprit=2 op=all_reduce line=13 kind=deadlock nproc=3 timeout=30
# zoo: about=two groups of every rank; rank 2 uses them in the other order
# zoo: source=https://github.com/NVIDIA/apex/pull/18
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

g1, g2 = dist.new_group(list(range(world))), dist.new_group(list(range(world)))
t = torch.ones(16)
if rank == 2:
    dist.all_reduce(t, group=g2)
    dist.all_reduce(t, group=g1)
else:
    dist.all_reduce(t, group=g1)
    dist.all_reduce(t, group=g2)
dist.destroy_process_group()
