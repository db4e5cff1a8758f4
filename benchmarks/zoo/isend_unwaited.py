# zoo: culprit=0 op=isend line=15|18 kind=exception nproc=2 timeout=30
# zoo: about=rank 0 isends and ends without waiting on the request: its process group goes away under the send, rank 1's recv fails
# zoo: source=https://github.com/pytorch/pytorch/issues/75512
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import os

x = torch.rand(256, 256)
if rank == 0:
    dist.isend(x, dst=1)                  # the bug: the request is dropped, never waited
    os._exit(0)                           # and the process ends at once (a launcher that exits hard)
else:
    dist.recv(x, src=0)
    print("received", x.sum().item())
dist.destroy_process_group()
