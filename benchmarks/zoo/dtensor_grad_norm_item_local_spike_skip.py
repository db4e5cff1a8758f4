# zoo: culprit=2 op=all_reduce line=28|33|30|37 kind=hang nproc=3 timeout=30
# zoo: about=the row-sharded weight's gradient is a DTensor and the spike guard skips the update when grad.norm().item() exceeds a threshold; on a Shard(0) DTensor the norm is still a partial placement and .item() returns the local shard's norm only, so at step 2, whose gradient spike sits in rows owned by rank 2, rank 2 alone skips the step and its loss all_reduce, and it ends one all_reduce behind the others
# zoo: source=https://github.com/pytorch/pytorch/issues/144054
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
ROWS, COLS, SPIKE = 12, 4, 10.0
rows = slice(rank * ROWS // world, (rank + 1) * ROWS // world)
torch.manual_seed(0)
weight = torch.randn(ROWS, COLS)


def local_grad(step):
    g = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(step)) * 0.1
    if step == 2:
        g[10] = 40.0  # a corrupted batch at step 2
    return g[rows]


for step in range(5):
    grad = DTensor.from_local(local_grad(step), mesh, [Shard(0)], run_check=False)
    gnorm = grad.norm()
    if gnorm.item() > SPIKE:
        print(f"rank {rank}: grad norm spike at step {step}, skipping the update", flush=True)
        continue
    weight[rows] -= 0.01 * grad.to_local()
    loss = weight[rows].pow(2).sum().reshape(1)
    dist.all_reduce(loss)
    if rank == 0:
        print(f"step {step}: loss {loss.item():.3f}", flush=True)

dist.barrier()
dist.destroy_process_group()
