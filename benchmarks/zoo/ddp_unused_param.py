# zoo: culprit=1 op=all_reduce line=24|19 kind=exception nproc=3 timeout=40
# zoo: about=DDP: rank 1 skips a layer in forward, so its gradient bucket is never reduced there
# zoo: source=https://github.com/open-mmlab/mmsegmentation/issues/3737
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x, skip):
        return self.b(x if skip else self.a(x))


model = DDP(Net(), bucket_cap_mb=0.0001)
for step in range(3):
    model(torch.randn(4, 8), skip=(rank == 1)).sum().backward()
dist.destroy_process_group()
