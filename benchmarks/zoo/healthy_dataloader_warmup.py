# zoo: culprit=none kind=pass nproc=2 timeout=120
# zoo: about=every rank's DataLoader takes 25 s for its first batches (a slow warm-up), then trains
# zoo: source=https://github.com/pytorch/pytorch/issues/82077 (a slow first batch read as a hang)
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("gloo")


class Warm(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i < 2:
            time.sleep(12.5)              # the warm-up: every rank, before its first op of the loop
        return torch.ones(4)


t = torch.ones(4)
dist.all_reduce(t)
for batch in DataLoader(Warm(), batch_size=1):
    dist.all_reduce(batch)
dist.destroy_process_group()
