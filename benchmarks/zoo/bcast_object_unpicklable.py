# zoo: culprit=0 op=broadcast_object_list line=14 kind=exception nproc=3 timeout=30
# zoo: about=rank 0 broadcasts a config holding a lambda: pickling fails on rank 0, the others wait in broadcast_object_list
# zoo: source=https://github.com/DeepVoltaire/AutoAugment/issues/32
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


cfg = [None]
if rank == 0:
    cfg = [{"lr": 0.1, "schedule": lambda step: 0.1 * 0.9 ** step}]   # the bug: not picklable
dist.broadcast_object_list(cfg, src=0)
x = torch.ones(16)
dist.all_reduce(x)
dist.destroy_process_group()
