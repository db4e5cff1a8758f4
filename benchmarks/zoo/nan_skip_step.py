# zoo: culprit=2 op=all_reduce|broadcast line=15|16|17 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 2 skips a step whose loss is NaN (continue), so it is one gradient all_reduce behind the others from then on
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/6430 (one rank skips a batch, the implicit sync breaks)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


grad = torch.ones(32)
for step in range(4):
    loss = torch.tensor(float("nan") if (rank == 2 and step == 1) else 1.0)
    if torch.isnan(loss):
        continue                          # the bug: a local skip of a collective step
    dist.all_reduce(grad)
dist.broadcast(torch.zeros(8), src=0)
dist.destroy_process_group()
