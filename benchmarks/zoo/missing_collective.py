# zoo: culprit=3 op=all_reduce|barrier line=12|13|14 kind=mismatch nproc=4 timeout=30
# zoo: about=rank 3 skips one all_reduce of the loop and reaches the barrier while the others are in the loop's last all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/138322
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(64)
for step in range(5):
    if rank == 3 and step == 2:
        continue                      # the bug: one all_reduce fewer on rank 3
    dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
