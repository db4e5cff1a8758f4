# zoo: culprit=1 op=all_gather line=17|35|34|29 kind=hang nproc=3 timeout=30
# zoo: about=a cross-rank mixup that all_gathers the batch is gated by aug_rng.random() < MIX_PROB, but aug_rng is seeded with SEED + rank (per-rank augmentation seeds, as in DETR); at step 2 only rank 1's draw passes, so it waits in all_gather while the others wait in the gradient all_reduce
# zoo: source=https://github.com/facebookresearch/detr/issues/297 (seed + rank so augmentations differ per GPU)
import random
import torch
import torch.distributed as dist
import torch.nn.functional as F

SEED = 1016
MIX_PROB = 0.3


def cross_rank_mix(x, y, lam=0.7):
    world = dist.get_world_size()
    xs = [torch.empty_like(x) for _ in range(world)]
    ys = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(xs, x)
    dist.all_gather(ys, y)
    partner = (dist.get_rank() + 1) % world
    return lam * x + (1 - lam) * xs[partner], lam * y + (1 - lam) * ys[partner]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    aug_rng = random.Random(SEED + rank)
    data_gen = torch.Generator().manual_seed(SEED + rank)
    for step in range(8):
        x = torch.randn(16, 32, generator=data_gen)
        y = F.one_hot(torch.randint(0, 10, (16,), generator=data_gen), 10).float()
        if aug_rng.random() < MIX_PROB:
            x, y = cross_rank_mix(x, y)
        loss = torch.sum(-y * F.log_softmax(model(x), dim=1), dim=1).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
