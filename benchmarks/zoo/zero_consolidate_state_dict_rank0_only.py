# zoo: culprit=0 op=consolidate_state_dict|broadcast line=21|34|33 kind=hang nproc=3 timeout=30
# zoo: about=the checkpoint helper gathers the ZeroRedundancyOptimizer shards with consolidate_state_dict(to=0) and is called under 'if rank == 0' like any other save; consolidation is collective (each shard owner broadcasts its state), so rank 0 waits in its broadcast while ranks 1 and 2 are in the next step's gradient all_reduce
# zoo: source=https://github.com/pytorch/ignite/issues/2623
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)


def save_checkpoint(step):
    opt.consolidate_state_dict(to=0)
    state = {"model": model.module.state_dict(), "optim": opt.state_dict(), "step": step}
    with tempfile.TemporaryDirectory() as ckpt_dir:
        torch.save(state, os.path.join(ckpt_dir, f"step{step}.pt"))


for step in range(1, 8):
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0 and rank == 0:
        save_checkpoint(step)
dist.destroy_process_group()
