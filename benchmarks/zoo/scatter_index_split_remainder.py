# zoo: culprit=0 op=scatter line=22|21 kind=exception nproc=3 timeout=30
# zoo: about=rank 0 shuffles the sample index and splits it with torch.split(idx, n // world): 10000 samples over 3 ranks leave a 4th chunk of 1, so the root's scatter_list is one too long and it raises, while the others wait in scatter
# zoo: source=https://github.com/bigscience-workshop/Megatron-DeepSpeed/pull/55
import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
N_SAMPLES = 10000


def shuffled_index(n, seed):
    return torch.from_numpy(np.random.default_rng(seed).permutation(n))


per_rank = N_SAMPLES // world
my_index = torch.empty(per_rank, dtype=torch.int64)
if rank == 0:
    idx = shuffled_index(N_SAMPLES, seed=101)
    chunks = list(torch.split(idx, per_rank))       # the remainder becomes an extra chunk
    dist.scatter(my_index, scatter_list=chunks, src=0)
else:
    dist.scatter(my_index, src=0)

# each rank tokenizes its share of the corpus
lengths = (my_index % 97).float()
stats = torch.tensor([lengths.sum().item(), float(len(my_index))])
dist.all_reduce(stats)
if rank == 0:
    print(f"mean length {stats[0] / stats[1]:.2f}")
dist.destroy_process_group()
