# zoo: culprit=3 op=all_reduce line=22|29|30|28 kind=abort nproc=4 timeout=30
# zoo: about=a 2x2 (dp, tp) mesh with functional collectives; the shared-expert branch reduces its output over the dp submesh (a copy of the gradient code) instead of tp, and only rank 3's batch routes tokens to it: rank 3's activation reduce meets rank 1's gradient reduce in their dp group and gloo aborts rank 1
# zoo: source=https://github.com/NVIDIA/Megatron-LM/pull/4851 (an MoE branch taken on some ranks only desynchronizes the tp/ep collectives)
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh["tp"], mesh["dp"]

torch.manual_seed(rank)
w_expert = torch.randn(8, 8)
w_shared = torch.randn(8, 8)


def expert_block(x, routes_to_shared):
    if routes_to_shared:
        # the bug: the shared expert's partial output is summed over dp, not tp
        return funcol.all_reduce(x @ w_shared, "sum", dp)
    return funcol.all_reduce(x @ w_expert, "sum", tp)


for step in range(3):
    x = torch.randn(4, 8)
    routes_to_shared = rank == 3 and step == 1    # only rank 3's batch hits the shared expert
    y = expert_block(x, routes_to_shared)
    grad = y.sum(0)
    grad = funcol.all_reduce(grad, "avg", dp)
    print(rank, step, grad.norm().item())
dist.destroy_process_group()
