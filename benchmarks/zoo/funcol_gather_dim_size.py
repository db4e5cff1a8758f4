# zoo: culprit=1 op=all_gather_tensor line=15|13 kind=abort nproc=3 timeout=30
# zoo: about=a functional all_gather_tensor where rank 1's local shard has 3 rows and the others' 2 (an uneven split done by hand)
# zoo: source=https://github.com/pytorch/pytorch/issues/156627
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

group = dist.group.WORLD
dist.all_reduce(torch.ones(4))
rows = 3 if rank == 1 else 2
shard = torch.full((rows, 4), float(rank))
full = funcol.all_gather_tensor(shard, gather_dim=0, group=group)
print(rank, full.shape, full.sum())
dist.destroy_process_group()
