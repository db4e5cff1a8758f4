# zoo: culprit=2 op=all_reduce line=12 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 2 all_reduces float64 where the others use float32
# zoo: source=https://github.com/pytorch/pytorch/issues/150433
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(64, dtype=torch.float64 if rank == 2 else torch.float32)
dist.all_reduce(torch.ones(4))
dist.all_reduce(t)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
