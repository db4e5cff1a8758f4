# zoo: culprit=0 op=scatter line=22|21 kind=exception nproc=3 timeout=30
# zoo: about=rank 0 reads the evaluation prompts and scatters them with torch.chunk, whose last chunk is short (10 rows over 3 ranks: 4, 4, 2); the receivers size their buffers for 4 rows and the root's scatter list is uneven
# zoo: source=https://github.com/pytorch/pytorch/pull/75991 (uneven scatter in shard_tensor: the shards must be resized to one size before dist.scatter)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
N_PROMPTS, DIM = 10, 6
rows = -(-N_PROMPTS // world)


def load_prompts():
    g = torch.Generator().manual_seed(0)
    return torch.randn(N_PROMPTS, DIM, generator=g)


local = torch.empty(rows, DIM)
if rank == 0:
    prompts = load_prompts()
    chunks = list(torch.chunk(prompts, world))
    dist.scatter(local, chunks, src=0)
else:
    dist.scatter(local, None, src=0)
score = torch.tensor([local.sum().item()])
dist.all_reduce(score)
print(f"rank {rank} scored {score.item():.3f}")
dist.destroy_process_group()
