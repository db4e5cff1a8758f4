# zoo: culprit=2 op=monitored_barrier line=14 kind=timeout nproc=3 timeout=60
# zoo: about=rank 2 is still loading its shard when the others reach monitored_barrier; torch names it
# zoo: source=https://github.com/NVIDIA/nccl/issues/849 (RuntimeError: [Rank 0]: Ranks 4, 5, 6, 7 failed to pass monitoredBarrier)
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 2:
    time.sleep(3600)                      # a slow shard load that never ends
dist.monitored_barrier(timeout=timedelta(seconds=5))
t = torch.ones(4)
dist.all_reduce(t)
dist.destroy_process_group()
