# zoo: culprit=1 op=destroy_process_group line=15 kind=exception nproc=3 timeout=60
# zoo: about=rank 1 tears its process group down after the training loop, before the final metric all_reduce
# zoo: source=https://github.com/mindspore-ai/hyper-parallel/issues/516 (destroy_process_group tears the world group down; the next call raises 'Default process group has not been initialized')
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
for step in range(3):
    dist.all_reduce(t)
metric = torch.tensor([float(rank)])
if rank == 1:
    print("cleanup")
    dist.destroy_process_group()          # an early cleanup hook
dist.all_reduce(metric)
if dist.is_initialized():
    dist.destroy_process_group()
