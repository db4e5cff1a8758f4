# zoo: culprit=2 op=parallelize_module|all_reduce line=33|29|41 kind=hang nproc=4 timeout=30
# zoo: about=activation checkpointing is switched on per rank when its longest sequence exceeds 2048 tokens, and it wraps the blocks before the tensor-parallel plan is applied; on rank 2 (the long-document shard) the wrappers add a _checkpoint_wrapped_module level to every name, parallelize_module only warns that the plan keys do not resolve and shards nothing, so rank 2 trains a plain local model and waits in the loss all_reduce while the others wait in the plan's weight scatter
# zoo: source=https://github.com/pytorch/pytorch/issues/117399
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(32, 128), nn.Linear(128, 32)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = nn.Sequential(Block(), Block())
max_seq_len = [512, 1024, 4096, 768][rank]     # longest document in this rank's shard
if max_seq_len > 2048:
    for i in range(len(model)):
        model[i] = checkpoint_wrapper(model[i])
plan = {}
for i in range(len(model)):
    plan[f"{i}.up"], plan[f"{i}.down"] = ColwiseParallel(), RowwiseParallel()
parallelize_module(model, mesh, plan)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(step))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    dist.all_reduce(loss.detach().reshape(1))
dist.destroy_process_group()
