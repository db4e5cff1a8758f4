# zoo: culprit=1 op=distribute_tensor|full_tensor line=22|16|25 kind=mismatch nproc=2 timeout=40
# zoo: about=each rank loads the full embedding from its node's copy of the checkpoint and shards it with distribute_tensor(Shard(0)); rank 1's copy comes from the run that padded the vocabulary to a multiple of 64, so its tensor has more rows and the shards it expects from rank 0's scatter do not match: the scatter completes with mismatched sizes, and gloo aborts rank 0 (a healthy rank) at the next full_tensor all-gather
# zoo: source=https://github.com/hpcaitech/ColossalAI/issues/6167 (size mismatch loading tensor-parallel checkpoints when vocab_size is padded) https://github.com/karpathy/nanochat/pull/364
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))


def load_embedding(rank, vocab=50257, dim=16):
    padded = rank == 1                               # node 1 still holds the padded export
    rows = (vocab + 63) // 64 * 64 if padded else vocab
    torch.manual_seed(0)
    return torch.randn(rows, dim)


full = load_embedding(rank)
weight = distribute_tensor(full, mesh, [Shard(0)])
local = weight.to_local()
print(f"rank {rank} shard {tuple(local.shape)}", flush=True)
norm = weight.full_tensor().norm()
print(f"rank {rank} norm {norm.item():.2f}", flush=True)
dist.destroy_process_group()
