# zoo: culprit=2 op=all_reduce|barrier line=14|16|19 kind=mismatch nproc=3 timeout=40
# zoo: about=DDP, rank 2 has one batch fewer than the others: they wait in the gradient all_reduce
# zoo: source=https://github.com/deepspeedai/DeepSpeed/issues/2223
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(torch.nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = 3 if rank == 2 else 4
for _ in range(batches):
    loss = model(torch.randn(16, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.barrier()
dist.destroy_process_group()
