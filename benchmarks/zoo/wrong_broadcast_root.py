# zoo: culprit=2|3 op=broadcast line=13 kind=exception nproc=4 timeout=30
# zoo: about=a subgroup [2, 3] broadcasts from src=0, a group rank where torch wants a global one
# zoo: source=https://github.com/pytorch/pytorch/issues/74602
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

sub = dist.new_group([2, 3])
t = torch.ones(16)
if rank in (2, 3):
    dist.broadcast(t, src=0, group=sub)      # meant: the group's first rank (global 2)
dist.all_reduce(t)
dist.destroy_process_group()
