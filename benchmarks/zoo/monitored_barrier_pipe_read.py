# zoo: culprit=1 op=monitored_barrier line=15|16 kind=timeout nproc=3 timeout=40
# zoo: about=rank 1 waits to read a status byte from a pipe whose writer it never started; monitored_barrier on the others times out and names rank 1
# zoo: source=https://github.com/pytorch/pytorch/pull/53773
import os
from datetime import timedelta
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

dist.all_reduce(torch.ones(4))
if rank == 1:
    read_end, write_end = os.pipe()
    status = os.read(read_end, 1)
dist.monitored_barrier(timeout=timedelta(seconds=10))
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
