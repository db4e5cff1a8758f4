# zoo: culprit=3 op=init_device_mesh|all_reduce line=15|12|20 kind=hang nodes=2 nproc=2 timeout=40
# zoo: about=each rank reads the tensor-parallel size from its own copy of the config; rank 3's is stale (tp=4), so its init_device_mesh builds a (1, 4) mesh where the others build (2, 2), and the mesh's subgroups do not match
# zoo: source=https://github.com/pytorch/pytorch/pull/96700 (the mesh must be the same on every rank; nothing checks it)
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

CONFIGS = {"current": {"tp": 2}, "stale": {"tp": 4}}
config = CONFIGS["stale" if rank == 3 else "current"]   # rank 3's node has the old file

tp = config["tp"]
mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
tp_group = mesh.get_group("tp")
dp_group = mesh.get_group("dp")

x = torch.ones(8)
dist.all_reduce(x, group=tp_group)
dist.all_reduce(x, group=dp_group)
print(rank, x[0].item())
dist.destroy_process_group()
