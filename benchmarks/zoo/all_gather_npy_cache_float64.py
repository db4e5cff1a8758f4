# zoo: culprit=2 op=all_gather line=24|22 kind=exception nproc=3 timeout=30
# zoo: about=the feature-normalisation helper all_gathers each rank's per-feature means into float32 buffers made with torch.zeros(n_features); rank 2's shard is served from the numpy cache, so torch.as_tensor keeps its float64 and all_gather raises on rank 2 (invalid tensor type) while the others wait for it
# zoo: source=https://github.com/pytorch/pytorch/issues/84525
import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SHARD_SOURCE = ["parquet", "parquet", "npy_cache"][rank]
N_FEATURES = 8


def load_shard():
    rows = [[float((rank * 31 + i * j) % 17) for j in range(N_FEATURES)] for i in range(200)]
    if SHARD_SOURCE == "npy_cache":
        return np.asarray(rows)
    return torch.tensor(rows)


def global_feature_means(shard):
    local = torch.as_tensor(shard).mean(dim=0)
    parts = [torch.zeros(N_FEATURES) for _ in range(world)]
    dist.all_gather(parts, local)
    return torch.stack(parts).mean(dim=0)


shard = load_shard()
mean = global_feature_means(shard)
x = (torch.as_tensor(shard, dtype=torch.float32) - mean).sum(dim=0)
dist.all_reduce(x)
print(f"rank {rank}: normalised column sums {x[:3].tolist()}", flush=True)
dist.destroy_process_group()
