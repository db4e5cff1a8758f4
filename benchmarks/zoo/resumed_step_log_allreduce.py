# zoo: culprit=2 op=all_reduce line=12|17|15 kind=abort nproc=3 timeout=30
# zoo: about=the loss is all_reduced for logging every 5th step; rank 2 restored its step counter from an older checkpoint, so its logging steps are not the others'
# zoo: source=https://github.com/ByteDance-Seed/VeOmni/pull/1179
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

grad = torch.ones(256)
loss = torch.zeros(1)
start_step = 98 if rank == 2 else 100
for step in range(start_step, start_step + 8):
    loss += 0.01
    dist.all_reduce(grad)
    if step % 5 == 0:
        dist.all_reduce(loss)
dist.barrier()
dist.destroy_process_group()
