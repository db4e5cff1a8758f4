# zoo: culprit=2 op=distribute_tensor line=15|14 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 2 reads the placement from its own (stale) plan and distributes the embedding as Replicate where the others Shard(0) it
# zoo: source=https://github.com/pytorch/pytorch/issues/88838 (a comment: must each rank's tensor passed to distribute_tensor agree)
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Replicate, Shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

mesh = init_device_mesh("cpu", (world,))
weight = torch.arange(48.0).reshape(12, 4)
placement = Replicate() if rank == 2 else Shard(0)
dweight = distribute_tensor(weight, mesh, [placement])
dist.all_reduce(torch.ones(4))
print(rank, dweight.to_local().shape)
dist.destroy_process_group()
