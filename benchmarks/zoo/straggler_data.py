# zoo: culprit=1 op=all_reduce line=21|25|26 kind=straggler nproc=3 timeout=60
# zoo: about=rank 1's dataset decodes slowly (0.3 s an item), the others wait for it at every all_reduce; the run passes
# zoo: source=https://github.com/traceopt-ai/traceml/issues/252 (a dataloader stall on one rank: an input straggler)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import time

from torch.utils.data import DataLoader, Dataset

class Images(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        if rank == 1:
            time.sleep(0.3)               # a slow disk or decoder on rank 1
        return torch.ones(4)

grad = torch.ones(16)
for batch in DataLoader(Images(), batch_size=1):
    dist.all_reduce(grad)
dist.destroy_process_group()
