# zoo: culprit=1 op=all_reduce line=28|32 kind=hang nproc=3 timeout=30
# zoo: about=the loop skips a micro-batch whose samples were all filtered out (too short to form a block) with a per-rank continue: rank 1's third batch is empty, so it skips that step's gradient all_reduces and runs one step ahead of the others until it waits alone at the end
# zoo: source=https://github.com/NVIDIA-NeMo/Automodel/pull/2468
import torch
import torch.distributed as dist
import torch.nn.functional as F

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
MIN_LEN = 4


def micro_batches(rank, steps=5):
    g = torch.Generator().manual_seed(rank)
    for step in range(steps):
        lengths = torch.randint(MIN_LEN, 12, (16,), generator=g)
        if rank == 1 and step == 2:
            lengths[:] = 2                               # a batch of short samples
        keep = lengths >= MIN_LEN
        yield torch.randn(16, 8, generator=g)[keep], torch.randn(16, 1, generator=g)[keep]


for step, (x, y) in enumerate(micro_batches(rank)):
    if x.shape[0] == 0:
        continue                                         # no valid sample: skip the step
    loss = F.mse_loss(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    opt.zero_grad()
    print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)

dist.barrier()
dist.destroy_process_group()
