# zoo: culprit=1 op=all_gather_object line=11 kind=exception nproc=3 timeout=30
# zoo: about=rank 1's output list of all_gather_object is one short: it raises once the gather is done
# zoo: source=https://github.com/pytorch/pytorch/issues/27440 (an output list whose length is not the group's size)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

out = [None] * (world - 1 if rank == 1 else world)
dist.all_gather_object(out, {"rank": rank})
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
