# zoo: culprit=1 op=fully_shard|all_gather_into_tensor line=20|22 kind=abort nproc=2 timeout=30
# zoo: about=FSDP2: rank 1 shards only the root module where rank 0 also shards each layer, so their parameter all_gathers differ in size: gloo aborts rank 0 (SIGABRT)
# zoo: source=https://github.com/pytorch/pytorch/issues/75373
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
if rank != 1:                             # the bug: rank 1 skips the per-layer wrap
    for layer in model:
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
for step in range(2):
    model(torch.randn(8, 16)).sum().backward()
dist.destroy_process_group()
