# zoo: culprit=3 op=new_group line=14 kind=hang nproc=4 timeout=60
# zoo: about=rank 3 builds its data-parallel group with every rank where the others leave it out
# zoo: source=https://dev-discuss.pytorch.org/t/rfc-c10d-a-new-pytorch-api-split-group-to-create-a-process-group-through-ncclcommsplit/2233 (every rank must enter the group creation with the same split)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
dist.all_reduce(t)
if rank != 3:
    group = dist.new_group([0, 1, 2])
else:
    group = dist.new_group([0, 1, 2, 3])  # the member list from an old config
if rank in (0, 1, 2):
    dist.all_reduce(t, group=group)
dist.all_reduce(t)
dist.destroy_process_group()
