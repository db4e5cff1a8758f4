# zoo: culprit=0 op=all_reduce line=19|20 kind=straggler nproc=3 timeout=60
# zoo: about=rank 0 writes its step log to a slow sink (0.25 s a write) before each all_reduce, the others wait for it every step; the run passes
# zoo: source=https://github.com/pytorch/torchtitan/pull/339 (logging on rank 0 only, and the straggler effect of its writes)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import time

def log_metrics(step):
    time.sleep(0.25)                      # a blocking write to a remote dashboard

grad = torch.ones(16)
for step in range(12):
    if rank == 0:
        log_metrics(step)
    dist.all_reduce(grad)
dist.destroy_process_group()
