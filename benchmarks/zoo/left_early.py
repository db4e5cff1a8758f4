# zoo: culprit=3 op=all_reduce line=13|14 kind=exit0 nodes=2 nproc=2 timeout=30
# zoo: about=rank 3 leaves the training loop early and exits 0; the others wait in the next all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/28257
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(64)
for step in range(6):
    if rank == 3 and step == 3:
        break
    dist.all_reduce(t)
dist.destroy_process_group()
