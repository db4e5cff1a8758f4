# zoo: culprit=2 op=all_reduce line=33|30|24 kind=exception nproc=3 timeout=40
# zoo: about=rank 2's DataLoader worker decodes an oversized sample and is killed (SIGKILL, as the kernel's OOM killer does); rank 2's main process raises "DataLoader worker is killed by signal: Killed" and the others wait in all_reduce
# zoo: source=https://github.com/alibaba/Pai-Megatron-Patch/issues/583
import os
import signal

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

WORKER_MEMORY_BYTES = 64 << 20


class Images(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        decoded_bytes = (512 << 20) if (rank == 2 and i == 5) else (1 << 20)   # one huge image
        if decoded_bytes > WORKER_MEMORY_BYTES:
            os.kill(os.getpid(), signal.SIGKILL)   # stands in for the kernel's OOM killer
        return torch.randn(3, 8, 8)


model = torch.nn.Linear(3 * 8 * 8, 2)
loader = DataLoader(Images(), batch_size=2, num_workers=1)
for batch in loader:
    model(batch.flatten(1)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
dist.destroy_process_group()
