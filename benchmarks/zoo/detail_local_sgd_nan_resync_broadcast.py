# zoo: culprit=2 op=broadcast line=22|39|41 kind=mismatch nproc=3 timeout=30
# zoo: about=with TORCH_DISTRIBUTED_DEBUG=DETAIL, local SGD averages the parameters every 4 steps with all_reduce, and a rank whose local loss went non-finite instead re-syncs from rank 0 with broadcast; rank 2's batch at step 3 holds an inf feature, so at the sync it broadcasts where the others all_reduce and DETAIL's fingerprint check stops every rank (op type BROADCAST vs ALLREDUCE)
# zoo: source=https://github.com/ai2cm/ace/pull/850
import os

os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
SYNC_EVERY = 4


def sync_parameters(diverged):
    for p in model.parameters():
        if diverged:
            dist.broadcast(p.data, src=0)          # take rank 0's healthy weights
        else:
            dist.all_reduce(p.data)
            p.data /= world


diverged = False
for step in range(1, 9):
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(100 * rank + step))
    if rank == 2 and step == 3:
        x[5, 7] = float("inf")                     # a corrupt feature in this rank's shard
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if torch.isfinite(loss):
        opt.step()
    else:
        diverged = True
    if step % SYNC_EVERY == 0:
        sync_parameters(diverged)
        diverged = False
dist.destroy_process_group()
