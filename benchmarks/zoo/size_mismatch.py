# zoo: culprit=1 op=all_reduce line=12 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 1 all_reduces 1000 elements where the others have 10
# zoo: source=https://github.com/pytorch/pytorch/issues/97191
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(1000 if rank == 1 else 10)
dist.all_reduce(torch.ones(4))
dist.all_reduce(t)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
