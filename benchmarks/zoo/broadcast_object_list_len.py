# zoo: culprit=2 op=broadcast_object_list line=12 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 2 passes a list of 2 objects to broadcast_object_list, the root a list of 1
# zoo: source=https://github.com/Ascend/pytorch/issues/58 (the list's length must be the same on every rank)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

objs = [{"lr": 0.1}] if rank != 2 else [None, None]
dist.all_reduce(torch.ones(4))
dist.broadcast_object_list(objs, src=0)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
