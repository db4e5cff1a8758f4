# zoo: culprit=1 op=send line=14 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 computes its peer as itself and torch raises (destination rank should not be the same as the current rank)
# zoo: source=https://github.com/pytorch/pytorch/issues/83912 (dist.send to the current rank itself; torch checks it since pull 89004)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


x = torch.ones(16)
peer = (rank + world) % world if rank == 1 else (rank + 1) % world   # the bug: + world, not + 1
if rank == 1:
    dist.send(x, dst=peer)
elif rank == 2:
    dist.recv(x, src=1)
dist.barrier()
dist.destroy_process_group()
