# zoo: culprit=0 op=all_gather_into_tensor|barrier line=18 kind=hang nproc=2 timeout=40
# zoo: about=FSDP2 model: rank 0 runs a validation forward alone, which all-gathers the sharded parameters; the other rank is at the barrier
# zoo: source=https://github.com/RapidFireAI/rapidfireai/pull/179
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

mesh = init_device_mesh("cpu", (world,))
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
fully_shard(model, mesh=mesh)
model(torch.randn(8, 16)).sum().backward()
if rank == 0:
    with torch.no_grad():
        val = model(torch.randn(8, 16)).mean()
dist.barrier()
dist.destroy_process_group()
