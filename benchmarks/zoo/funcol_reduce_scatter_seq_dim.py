# zoo: culprit=1 op=reduce_scatter_tensor line=22|14 kind=silent nproc=2 timeout=30
# zoo: about=sequence parallelism with functional collectives: the row-parallel output is reduce-scattered along the sequence dimension, which each rank takes from its model config's layout; rank 1's config is batch-first, so it scatters along dim 1 where rank 0 scatters along dim 0: the byte counts match, the reduction completes, and rank 1's shard mixes other tokens' partial sums
# zoo: source=https://github.com/ROCm/aiter/pull/3395 (reduce_scatter along the wrong dimension gives incorrect results without an error)
import os
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
layout = os.environ.get("ACT_LAYOUT", "bsh" if rank == 1 else "sbh")
seq_dim = layout.index("s")
SEQ, BATCH, HID = 8, 4, 16
torch.manual_seed(0)
tokens = torch.randn(SEQ, BATCH, HID)
if layout == "bsh":
    tokens = tokens.transpose(0, 1).contiguous()
w = torch.randn(HID, HID)
partial = tokens @ w.chunk(world)[rank].repeat(world, 1) / world
shard = funcol.reduce_scatter_tensor(partial, "sum", scatter_dim=seq_dim, group=mesh)
shard = funcol.wait_tensor(shard)
check = torch.tensor([shard.float().abs().sum().item()])
dist.all_reduce(check)
print(f"rank {rank} shard {tuple(shard.shape)} checksum {check.item():.3f}")
dist.destroy_process_group()
