# zoo: culprit=0 op=isend line=16|17 kind=exception nproc=2 timeout=30
# zoo: about=rank 0 isends 64 MB and ends without waiting on the request: its process group goes away under the send, rank 1's recv fails
# zoo: source=https://github.com/pytorch/pytorch/issues/75512
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import os
import time

x = torch.rand(4096, 4096)                # 64 MB: more than the sockets can take at once
dist.barrier()                            # the pair is connected: a step before this one
if rank == 0:
    dist.isend(x, dst=1)                  # the bug: the request is dropped, never waited
    os._exit(0)                           # and the process ends at once (a launcher that exits hard)
else:
    time.sleep(1)                         # rank 1 is still busy with its own step
    dist.recv(x, src=0)
    print("received", x.sum().item())
dist.destroy_process_group()
