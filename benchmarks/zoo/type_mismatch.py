# zoo: culprit=2 op=broadcast line=14 kind=mismatch nproc=4 timeout=30
# zoo: about=rank 2 calls broadcast where the others call all_reduce, same tensor
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/19680
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(100)
for _ in range(3):
    dist.all_reduce(t)
if rank == 2:
    dist.broadcast(t, src=0)
else:
    dist.all_reduce(t)
dist.destroy_process_group()
