# zoo: culprit=0 op=broadcast|barrier line=19 kind=hang nproc=2 timeout=40
# zoo: about=rank 0 validates through the DDP wrapper alone; with BatchNorm buffers, DDP's forward broadcasts them, and the other rank is at the barrier
# zoo: source=https://github.com/pytorch/pytorch/issues/54059
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.randn(16, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
if rank == 0:
    with torch.no_grad():
        val = model(torch.randn(16, 8)).mean()
dist.barrier()
dist.destroy_process_group()
