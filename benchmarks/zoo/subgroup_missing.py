# zoo: culprit=3 op=all_reduce line=14 kind=hang nproc=4 timeout=30
# zoo: about=rank 3 skips its subgroup's all_reduce and ends; rank 2 waits in it
# zoo: source=https://github.com/pytorch/pytorch/issues/81291
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

sub = dist.new_group([2, 3])
t = torch.ones(16)
dist.all_reduce(t)
if rank == 2:
    dist.all_reduce(t, group=sub)
dist.destroy_process_group()
