# zoo: culprit=1 op=gather_object line=13 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 is the gather_object destination but passes object_gather_list=None (the others set dst=1 and it kept the rank-0 code): torch raises on rank 1
# zoo: source=https://github.com/flowersteam/lamorel/issues/19
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


stats = {"rank": rank, "loss": 0.5}
out = [None] * world if rank == 0 else None   # the bug: the list is made on rank 0, the dst is 1
dist.gather_object(stats, out, dst=1)
dist.barrier()
dist.destroy_process_group()
