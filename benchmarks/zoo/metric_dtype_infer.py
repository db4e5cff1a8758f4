# zoo: culprit=1 op=all_reduce line=16|18 kind=abort nproc=3 timeout=30
# zoo: about=rank 1's accuracy adds numpy bools, so its running sum is a numpy float64 and torch.tensor infers float64 there, float32 elsewhere: gloo's size check aborts rank 0
# zoo: source=https://github.com/modelscope/ms-swift/issues/9550
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import numpy as np

state, count = 0.0, 0
for step in range(4):
    acc = np.all(np.ones(3) > 0) if rank == 1 else 1.0   # rank 1 takes the sequence-level path
    state, count = state + acc, count + 1
metric = torch.tensor([state, count])     # float64 on rank 1, float32 elsewhere
dist.all_reduce(metric)
print(rank, metric)
dist.destroy_process_group()
