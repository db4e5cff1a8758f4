# zoo: culprit=2 op=all_reduce line=14|15 kind=straggler nproc=3 timeout=90
# zoo: about=rank 2 arrives 5 s late at every all_reduce (inside the stall window): slow, not stalled
# zoo: source=https://github.com/traceopt-ai/traceml/issues/252
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(16)
for step in range(4):
    if rank == 2:
        time.sleep(5)
    dist.all_reduce(t)
dist.destroy_process_group()
