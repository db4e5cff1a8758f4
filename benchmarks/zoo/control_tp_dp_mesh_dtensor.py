# zoo: culprit=none kind=pass nproc=4 timeout=60
# zoo: about=a correct script: a 2x2 (dp, tp) device mesh; a column-parallel weight is a DTensor sharded over tp and gathered with full_tensor, the loss is averaged over dp with a functional all_reduce, and the ranks meet at a barrier
# zoo: source=https://docs.pytorch.org/tutorials/recipes/distributed_device_mesh.html (a 2D (dp, tp) DeviceMesh used as the tutorial shows)
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
torch.manual_seed(0)
w_full = torch.randn(16, 8)
w = distribute_tensor(w_full, tp_mesh, [Shard(0)])
for step in range(3):
    g = torch.Generator().manual_seed(100 * step + dp_mesh.get_local_rank())
    x = torch.randn(4, 8, generator=g)
    y_local = x @ w.to_local().t()
    y = distribute_tensor(torch.zeros(4, 16), tp_mesh, [Replicate()])
    full_w = w.full_tensor()
    loss = (x @ full_w.t()).pow(2).mean()
    loss = funcol.wait_tensor(funcol.all_reduce(loss.detach().reshape(1), "sum", dp_mesh)) / 2
    if rank == 0:
        print(f"step {step} loss {loss.item():.4f} local out {tuple(y_local.shape)}")
dist.barrier()
dist.destroy_process_group()
