# zoo: culprit=2 op=broadcast line=13 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 2 broadcasts from root 1, the others from root 0
# zoo: source=https://github.com/pytorch/pytorch/issues/39706 (an inconsistent root across ranks)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.full((64,), float(rank))
dist.all_reduce(t)
src = 1 if rank == 2 else 0           # the bug: rank 2 reads another root
dist.broadcast(t, src=src)
dist.all_reduce(t)
dist.destroy_process_group()
