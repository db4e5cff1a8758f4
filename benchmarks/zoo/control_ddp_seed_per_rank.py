# zoo: culprit=none kind=pass nproc=3 timeout=40
# zoo: about=a correct script that looks wrong: each rank seeds with its own rank before building the model, so the initial weights differ, but DDP's constructor broadcasts rank 0's parameters and buffers, and every rank trains the same model
# zoo: source=https://discuss.pytorch.org/t/model-and-optimizer-parameters-synchronization-at-start/214872
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)                               # "so that each rank's data augmentation differs"
net = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
model = DDP(net)
opt = torch.optim.SGD(model.parameters(), lr=0.05)

for step in range(5):
    x, y = torch.randn(16, 10), torch.randint(0, 2, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

checksum = torch.tensor([sum(p.detach().sum().item() for p in model.parameters())])
everyone = [torch.zeros(1) for _ in range(world)]
dist.all_gather(everyone, checksum)
assert all(torch.allclose(everyone[0], c) for c in everyone), everyone
if rank == 0:
    print("parameters in sync:", [round(c.item(), 4) for c in everyone], flush=True)
dist.destroy_process_group()
