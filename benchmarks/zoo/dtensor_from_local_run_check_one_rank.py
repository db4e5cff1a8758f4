# zoo: culprit=1 op=from_local|broadcast line=18|13 kind=abort nproc=2 timeout=40
# zoo: about=the tensor-parallel layer wraps its replicated bias with DTensor.from_local(run_check=...) taken from a debug flag in the node's environment; rank 1's node has it on, so rank 1 alone runs the check's broadcast while rank 0 goes on to the next collective
# zoo: source=https://github.com/pytorch/pytorch/pull/130289 (from_local's run_check costs extra communication; it became off by default because so many calls forgot run_check=False)
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
DEBUG_CHECKS = os.environ.get("TP_DEBUG_CHECKS", "1" if rank == 1 else "0") == "1"
torch.manual_seed(0)
full_w = torch.randn(16, 8)
bias = torch.zeros(16)
w = DTensor.from_local(full_w.chunk(world)[rank], mesh, [Shard(0)], run_check=False)
b = DTensor.from_local(bias, mesh, [Replicate()], run_check=DEBUG_CHECKS)
for step in range(3):
    x = torch.randn(4, 8)
    y_local = x @ w.to_local().t() + b.to_local().chunk(world)[rank]
    y = DTensor.from_local(y_local, mesh, [Shard(1)], run_check=False).full_tensor()
    print(f"rank {rank} step {step} out {y.sum().item():.3f}")
dist.destroy_process_group()
