# zoo: culprit=none kind=pass nproc=4 timeout=90
# zoo: about=a correct script that looks wrong: every rank calls ZeroRedundancyOptimizer.consolidate_state_dict(to=0) and only rank 0 calls state_dict() and saves, then publishes the file name in the store for the others' store.wait; uneven per-rank predictions are gathered with functional collectives by padding to the all_reduced maximum length and trimming with the gathered lengths
# zoo: source=https://github.com/pytorch/pytorch/pull/60285 (consolidation is collective, the state_dict call may stay on one rank)
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
group = dist.group.WORLD
store = dist.distributed_c10d._get_default_store()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)

with tempfile.TemporaryDirectory() as ckpt_dir:
    for step in range(1, 7):
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 3 == 0:
            opt.consolidate_state_dict(to=0)
            if rank == 0:
                name = f"step{step}.pt"
                torch.save({"optim": opt.state_dict(), "step": step}, os.path.join(ckpt_dir, name))
                store.set(f"ckpt/{step}", name)
            store.wait([f"ckpt/{step}"], timedelta(seconds=60))
            assert store.get(f"ckpt/{step}").decode() == f"step{step}.pt"

preds = torch.arange(5 + 3 * rank, dtype=torch.float32) + 100 * rank   # uneven: 5, 8, 11, 14
n = torch.tensor([preds.numel()], dtype=torch.float32)
max_n = int(funcol.all_reduce(n, "max", group).item())
lengths = funcol.all_gather_single(n, 0, group)
padded = torch.cat([preds, preds.new_zeros(max_n - preds.numel())])
everyone = funcol.all_gather_single(padded, 0, group).reshape(world, max_n)
merged = torch.cat([everyone[r, :int(lengths[r])] for r in range(world)])
assert merged.numel() == int(lengths.sum())
if rank == 0:
    print("gathered", merged.numel(), "predictions", flush=True)
dist.barrier()
dist.destroy_process_group()
