# zoo: culprit=1 op=fully_shard|all_gather_into_tensor line=25|17|14 kind=abort nproc=2 timeout=40
# zoo: about=FSDP2: the model is cast to the dtype named by the node's config before fully_shard; rank 1's config says bf16, rank 0's fp32, so their parameter shards differ in bytes and the first forward's all-gather fails (gloo's size check)
# zoo: source=https://github.com/huggingface/accelerate/pull/3985 (the dtype the model is cast to before fully_shard decides what FSDP2 all-gathers; mixed dtypes break it)
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
param_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[
    os.environ.get("PARAM_DTYPE", "bf16" if rank == 1 else "fp32")]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
model = model.to(param_dtype)
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(8, 32, dtype=param_dtype)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"rank {rank} step {step} loss {loss.item():.4f}")
dist.destroy_process_group()
