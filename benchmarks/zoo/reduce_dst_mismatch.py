# zoo: culprit=1 op=reduce line=12 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 1 reduces to dst 1, the others to dst 0
# zoo: source=https://github.com/pytorch/pytorch/issues/39706
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(64)
dist.all_reduce(t)
dist.reduce(t, dst=1 if rank == 1 else 0)
dist.all_reduce(t)
dist.destroy_process_group()
