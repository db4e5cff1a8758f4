# zoo: culprit=1 op=all_reduce line=20|24 kind=hang nproc=3 timeout=30
# zoo: about=rank 1's dataset blocks on its fourth item: the others wait in all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/87995
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import time
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if rank == 1 and i == 3:
            time.sleep(3600)          # a stuck read
        return torch.ones(4)


for batch in DataLoader(Slow(), batch_size=1):
    dist.all_reduce(batch)
dist.destroy_process_group()
