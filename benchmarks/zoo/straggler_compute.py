# zoo: culprit=3 op=all_reduce line=20|21 kind=straggler nproc=4 timeout=60
# zoo: about=rank 3 gets a batch four times the others' (an uneven shard) and computes 0.3 s longer each step; the run passes
# zoo: source=https://github.com/marin-community/marin/issues/4236
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import time

def compute(batch_size):
    end = time.perf_counter() + 0.1 * batch_size / 32
    while time.perf_counter() < end:      # CPU work in proportion to the batch
        pass

grad = torch.ones(16)
for step in range(12):
    compute(128 if rank == 3 else 32)     # the bug: the shard sizes differ
    dist.all_reduce(grad)
dist.destroy_process_group()
