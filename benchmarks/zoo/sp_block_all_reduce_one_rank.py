# zoo: culprit=1 op=all_reduce line=20|16 kind=silent nproc=4 timeout=60
# zoo: about=tensor-parallel MLP blocks with sequence parallelism by hand: after the row-parallel linear every rank reduce_scatters the partial sums into its token shard, but rank 1 decides from its local shard's length that the block is too short for sequence parallelism and all_reduces the whole output (then takes its own rows); gloo runs its reduce_scatter as an all_reduce of the whole buffer, so it completes
# zoo: source=https://github.com/sgl-project/sglang-jax/pull/952 https://github.com/argonne-lcf/Megatron-DeepSpeed/issues/45
import torch
import torch.distributed as dist
import torch.nn.functional as F

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def tp_block(shard, w1, w2, min_tokens):
    full = torch.empty(shard.shape[0] * world, shard.shape[1])
    dist.all_gather_into_tensor(full, shard)                # the tokens of every rank
    partial = F.linear(F.gelu(F.linear(full, w1)), w2)      # column- then row-parallel
    if full.shape[0] >= min_tokens if rank != 1 else shard.shape[0] >= min_tokens:
        out = torch.empty_like(shard)                       # the bug on rank 1: its shard's length
        dist.reduce_scatter_tensor(out, partial)            # each rank its tokens' sums
    else:
        dist.all_reduce(partial)                            # the whole sum, then its own rows
        out = partial.chunk(world)[rank].clone()
    return shard + out


torch.manual_seed(0)
weights = [(torch.randn(64, 16).chunk(world, 0)[rank] / 4, torch.randn(16, 64).chunk(world, 1)[rank] / 8)
           for _ in range(2)]                               # each rank its slice of the hidden units
x = torch.randn(16, 16).chunk(world)[rank]                  # this rank's 4 tokens of 16
with torch.no_grad():
    for w1, w2 in weights:
        x = tp_block(x, w1, w2, min_tokens=8)
print(rank, x.norm().item())
dist.barrier()
dist.destroy_process_group()
