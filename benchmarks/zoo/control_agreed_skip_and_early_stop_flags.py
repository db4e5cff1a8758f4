# zoo: culprit=none kind=pass nproc=3 timeout=60
# zoo: about=a correct script that looks wrong: rank 1 hits a NaN loss and each rank decides on its own, but the skip flag is all_reduced (MAX) so every rank skips that step together; ranks 0 and 2 evaluate uneven shards on an eval group that rank 2 lists in the other order (new_group sorts the members); early stopping is decided on rank 0 and broadcast
# zoo: source=https://github.com/ACEsuit/mace/pull/1216 (all ranks leave the epoch loop on patience because rank 0 broadcasts the decision)
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
EVAL_MEMBERS = [2, 0] if rank == 2 else [0, 2]
eval_group = dist.new_group(EVAL_MEMBERS)
torch.manual_seed(0)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best, bad_epochs, PATIENCE = float("inf"), 0, 2

for epoch in range(8):
    for step in range(5):
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1000 * epoch + 10 * step + rank))
        if rank == 1 and (epoch, step) == (1, 2):
            x[3, 4] = float("nan")
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        skip = torch.tensor([0.0 if torch.isfinite(loss) else 1.0])
        dist.all_reduce(skip, op=dist.ReduceOp.MAX)
        if skip.item():
            continue
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    if rank in EVAL_MEMBERS:
        n = {0: 48, 2: 80}[rank]
        xv = torch.randn(n, 8, generator=torch.Generator().manual_seed(7 + rank))
        with torch.no_grad():
            err = (model(xv) - xv.sum(1, keepdim=True)).pow(2).sum()
        stats = torch.tensor([float(err), float(n)])
        dist.all_reduce(stats, group=eval_group)
        val = (stats[0] / stats[1]).item()
    stop = torch.tensor([0.0])
    if rank == 0:
        best, bad_epochs = (val, 0) if val < best - 1e-3 else (best, bad_epochs + 1)
        stop[0] = float(bad_epochs >= PATIENCE)
    dist.broadcast(stop, src=0)
    if stop.item():
        break
dist.barrier()
dist.destroy_process_group()
