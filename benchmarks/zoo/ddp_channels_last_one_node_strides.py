# zoo: culprit=2 op=DistributedDataParallel line=28|27 kind=exception nproc=3 timeout=30
# zoo: about=the trainer converts the model to channels_last when the node's launcher config asks for it (a speed-up on the newer GPU nodes); only rank 2's node sets it, so its 4-d conv weights have other strides than rank 0's and DDP's constructor check raises on rank 2 ("appears not to match strides of the same param in process 0") while the others wait for it
# zoo: source=https://github.com/sail-sg/FDM/issues/4
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
NODE_CFG = [{}, {}, {"memory_format": "channels_last"}][rank]


def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )


model = build_model()
if NODE_CFG.get("memory_format") == "channels_last":
    model = model.to(memory_format=torch.channels_last)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()

dist.barrier()
dist.destroy_process_group()
