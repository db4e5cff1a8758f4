# zoo: culprit=0 op=all_reduce line=15 kind=mismatch nproc=3 timeout=30
# zoo: about=a metric all_reduce under `if rank == 0:` meets the others' next gradient all_reduce
# zoo: source=https://github.com/meta-llama/llama-cookbook/issues/297
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

grad = torch.ones(256)
for step in range(3):
    dist.all_reduce(grad)
    if rank == 0:
        loss = torch.tensor([0.5])
        dist.all_reduce(loss)         # only rank 0 logs the mean loss
dist.destroy_process_group()
