# zoo: culprit=2 op=full_tensor|from_local line=26|22|25 kind=abort nproc=3 timeout=30
# zoo: about=each rank wraps its rows of an 11-row embedding with DTensor.from_local(..., [Shard(0)]) without shape=, so DTensor assumes even shards; rank 2 holds 3 rows, the others 4, and the full_tensor() all-gather for the checkpoint has mismatched sizes: gloo aborts rank 2
# zoo: source=https://github.com/pytorch/pytorch/issues/144109
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))

VOCAB, DIM = 11, 4
torch.manual_seed(0)
full = torch.randn(VOCAB, DIM)
rows = torch.arange(VOCAB).tensor_split(world)[rank]   # 4, 4, 3 rows
local = full[rows].clone()                 # each rank loaded its own slice of the checkpoint


def as_dtensor(t):
    # the bug: without shape= and stride=, from_local assumes every shard has t's size
    return DTensor.from_local(t, mesh, [Shard(0)])


emb = as_dtensor(local)
state = {"embedding": emb.full_tensor()}      # gathered for the checkpoint
if rank == 0:
    print(state["embedding"].shape)
dist.destroy_process_group()
