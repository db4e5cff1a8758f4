# zoo: culprit=0 op=all_gather_into_tensor|full_tensor line=19|20 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 0 logs a sharded DTensor with full_tensor() under if rank == 0: its all_gather meets the others' next all_reduce
# zoo: source=https://github.com/areal-project/AReaL/pull/187
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

mesh = init_device_mesh("cpu", (world,))
w = distribute_tensor(torch.ones(6, 4), mesh, [Shard(0)])
grad = torch.ones(16)
for step in range(3):
    if rank == 0:
        print("weight norm", w.full_tensor().norm().item())   # the bug: a collective for one rank
    dist.all_reduce(grad)
dist.destroy_process_group()
