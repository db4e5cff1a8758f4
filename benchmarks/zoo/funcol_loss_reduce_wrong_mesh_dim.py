# zoo: culprit=3 op=all_reduce line=18|12 kind=exception nproc=4 timeout=30
# zoo: about=on a 2x2 (dp, tp) mesh the loss is summed with a functional all_reduce over the tp dimension; rank 3 takes the dimension from a stale config that names dp, so it reduces with rank 1 while rank 1 reduces with rank 0 and rank 2 waits for rank 3: ranks 0 and 1 finish and exit, and ranks 2 and 3 then fail with connection errors
# zoo: source=https://github.com/NVIDIA-NeMo/Automodel/pull/367 (a stale mesh-dimension name) https://github.com/areal-project/AReaL/issues/454 (dp and tp meshes mixed up)
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
LOSS_PARALLEL_DIM = {0: "tp", 1: "tp", 2: "tp", 3: "dp"}[rank]   # rank 3 read a stale job config

model = torch.nn.Linear(16, 8)
for step in range(3):
    logits = model(torch.randn(4, 16))
    local_loss = logits.logsumexp(-1).mean().detach()
    loss = funcol.all_reduce(local_loss, "sum", (mesh, mesh.mesh_dim_names.index(LOSS_PARALLEL_DIM)))
    loss = loss.wait() if hasattr(loss, "wait") else loss
    if rank == 0:
        print(f"step {step} loss {loss.item() / 2:.4f}", flush=True)
dist.destroy_process_group()
