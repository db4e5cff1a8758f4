# zoo: culprit=0+1 op=broadcast line=14 kind=exception nproc=4 timeout=30
# zoo: about=ranks 0 and 1 broadcast on the group [2, 3], which they are not in: torch raises on both (global rank 1 is not part of the group), ranks 2 and 3 then lose them at the barrier
# zoo: source=https://github.com/pytorch/pytorch/issues/67600
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


x = torch.tensor([float(rank)])
g01, g23 = dist.new_group([0, 1]), dist.new_group([2, 3])
if rank < 2:
    dist.broadcast(x, src=1, group=g23)   # the bug: g23, not g01
else:
    dist.broadcast(x, src=3, group=g23)
print(rank, x.item())
dist.barrier()
dist.destroy_process_group()
