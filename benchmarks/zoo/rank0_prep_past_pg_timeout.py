# zoo: culprit=0 op=barrier line=17|16|19|15 kind=timeout nproc=3 timeout=40
# zoo: about=rank 0 prepares the dataset while the others wait at a barrier; the preparation takes longer than the process group's 10 s timeout and the waiting ranks fail
# zoo: source=https://github.com/JIA-Lab-research/LongLoRA/issues/45
import time
from datetime import timedelta
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()

if rank > 0:
    dist.barrier()
if rank == 0:
    deadline = time.time() + 20
    while time.time() < deadline:
        tokens = [hash(f"sample {i}") % 50000 for i in range(20000)]
if rank == 0:
    dist.barrier()
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
