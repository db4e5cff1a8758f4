# zoo: culprit=2 op=new_group|all_reduce line=13|11|14 kind=hang nproc=4 timeout=30
# zoo: about=rank 2 builds the evaluation group's member list from a stale host count (three ranks), the others from four: its new_group is not theirs
# zoo: source=https://github.com/pytorch/pytorch/issues/25390
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

dist.all_reduce(torch.ones(4))
hosts = 3 if rank == 2 else world
members = list(range(hosts))
eval_group = dist.new_group(members)
dist.all_reduce(torch.ones(4), group=eval_group)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
