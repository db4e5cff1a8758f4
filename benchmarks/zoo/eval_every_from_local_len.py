# zoo: culprit=1 op=all_reduce line=27|12 kind=mismatch nproc=3 timeout=30
# zoo: about=the loop evaluates every len(train_loader) // 3 steps and all_reduces the eval metrics; the interval comes from each rank's own loader, and rank 1's shard file is shorter, so it evaluates (a 2-element all_reduce) at step 2 while the others are in step 3's gradient all_reduce, and gloo aborts a rank on the size mismatch
# zoo: source=https://github.com/dylanyunlon/Neuron_SP/issues/589 (a collective under a branch that ranks evaluate differently) https://github.com/ecmwf/WeatherGenerator/pull/2718
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SHARD_ROWS = {0: 96, 1: 80, 2: 96}[rank]               # rank 1's shard file is shorter
BATCH, TRAIN_STEPS = 8, 8
train_loader = [torch.randn(BATCH, 16) for _ in range(SHARD_ROWS // BATCH)]
eval_every = len(train_loader) // 3

model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(TRAIN_STEPS):
    x = train_loader[step % len(train_loader)]
    loss = model(x).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
    if (step + 1) % eval_every == 0:
        with torch.no_grad():
            metrics = torch.tensor([model(x).pow(2).sum().item(), float(x.shape[0])])
        dist.all_reduce(metrics)
        if rank == 0:
            print(f"step {step} eval {metrics[0] / metrics[1]:.4f}", flush=True)
dist.destroy_process_group()
