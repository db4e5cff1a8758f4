# zoo: culprit=3 op=all_gather_object|barrier line=12|13 kind=mismatch nproc=4 timeout=30
# zoo: about=rank 3 skips all_gather_object and goes on to the barrier
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/6430 (one rank skips what the others call, the object gather of the next hook hangs)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

out = [None] * world
if rank != 3:
    dist.all_gather_object(out, {"rank": rank})
dist.barrier()
dist.destroy_process_group()
