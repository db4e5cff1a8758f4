# zoo: culprit=2 op=DistributedDataParallel line=25|21|14 kind=exception nproc=3 timeout=40
# zoo: about=fine-tuning freezes the embedding when a flag is set; rank 2 reads the flag from its own environment and freezes it, the others train it, so DDP's parameter lists differ across ranks
# zoo: source=https://github.com/yifan123/flow_grpo/issues/245
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 2:
    os.environ["FREEZE_EMBEDDING"] = "1"      # exported in rank 2's node profile only

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(64, 4))


if os.environ.get("FREEZE_EMBEDDING") == "1":
    model[0].weight.requires_grad_(False)

opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)

ddp = DDP(model)
for step in range(3):
    ddp(torch.randint(0, 100, (8, 4))).sum().backward()
    opt.step(); opt.zero_grad()
dist.destroy_process_group()
