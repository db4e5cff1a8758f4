# zoo: culprit=2 op=scatter line=14 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 2 scatters from src 2 (its own rank, a copy-paste slip), the others from src 0
# zoo: source=https://github.com/pytorch/pytorch/issues/39706 (a root that differs between ranks)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


out = torch.zeros(4)
src = rank if rank == 2 else 0            # the bug: rank 2 names itself the source
chunks = [torch.full((4,), float(i)) for i in range(world)] if rank == src else None
dist.scatter(out, chunks, src=src)
dist.all_reduce(out)
print(rank, out)
dist.destroy_process_group()
