# zoo: culprit=1 op=all_reduce line=13|14 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 raises in Python between two all_reduces
# zoo: source=https://github.com/pytorch/torchtitan/issues/1790
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(16)
for step in range(4):
    if rank == 1 and step == 2:
        raise ValueError("bad batch")
    dist.all_reduce(t)
dist.destroy_process_group()
