# zoo: culprit=2 op=destroy_process_group line=16|13 kind=exception nproc=3 timeout=30
# zoo: about=rank 2 tears the default process group down after its first epoch (a cleanup in the wrong place); its next all_reduce raises
# zoo: source=https://github.com/pytorch/pytorch/issues/75097
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

world_pg = dist.group.WORLD
t = torch.ones(8)
for epoch in range(3):
    dist.all_reduce(t)
    if rank == 2 and epoch == 0:
        print("epoch done, cleaning up")
        dist.destroy_process_group()
dist.barrier(group=world_pg)
dist.destroy_process_group()
