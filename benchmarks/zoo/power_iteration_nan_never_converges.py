# zoo: culprit=0 op=all_reduce line=14|33|17 kind=hang nproc=4 timeout=30
# zoo: about=each rank estimates the top singular value of its batch's feature matrix by power iteration and loops 'while not abs(sigma - prev) < tol'; rank 0's first batch is all padding, its features are zero, v / v.norm() turns into NaN, the comparison is never true and rank 0 spins in Python while the others wait in the all_reduce of the spectral penalty
# zoo: source=https://github.com/openmm/openmm/pull/3758
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def top_singular_value(feats, tol=1e-5):
    v = torch.ones(feats.shape[1])
    sigma, prev = 0.0, float("inf")
    while not abs(sigma - prev) < tol:
        prev = sigma
        v = feats.T @ (feats @ v)
        v = v / v.norm()
        sigma = (feats @ v).norm().item()
    return sigma


def next_batch(step):
    tokens = torch.randint(1, 1000, (16, 32), generator=torch.Generator().manual_seed(rank * 100 + step))
    if rank == 0 and step == 0:
        tokens.zero_()                       # a batch made only of padding (id 0)
    mask = (tokens != 0).float()
    return torch.randn(16, 32, generator=torch.Generator().manual_seed(step)) * mask


for step in range(3):
    feats = next_batch(step)
    penalty = torch.tensor([top_singular_value(feats)])
    dist.all_reduce(penalty)
dist.destroy_process_group()
