# zoo: culprit=1 op=wait|all_reduce line=16|17 kind=hang nproc=3 timeout=30
# zoo: about=rank 1 waits on a store key nobody sets (the store wait is the call to name; the all_reduce it never reached is right too)
# zoo: source=https://github.com/pytorch/pytorch/issues/53840
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

from datetime import timedelta

t = torch.ones(16)
dist.all_reduce(t)
if rank == 1:
    store = dist.distributed_c10d._get_default_store()
    store.wait(["checkpoint-ready"], timedelta(hours=1))
dist.all_reduce(t)
dist.destroy_process_group()
