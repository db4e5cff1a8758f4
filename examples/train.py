"""A small DistributedDataParallel training script: the README's `--script` examples.

Every rank builds the same model (one seed), takes its own slice of each global batch,
and DDP averages the gradients in backward(). Each step also sleeps `--step-ms`, the
compute a real model's step would take, so a lab of it lasts long enough to watch (and
to kill a node in: each epoch takes a second at least, --epochs 20 twenty).

    labctl up --script examples/train.py -- --epochs 2
    labctl up --script examples/train.py --fault kill-node:1@10 --fault-clock join --pg-timeout 10 -- --epochs 20
    python -m torch.distributed.run --nproc-per-node 2 examples/train.py   # plain torchrun works too
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=20, help="steps per epoch (default 20)")
parser.add_argument("--batch", type=int, default=16, help="rows per rank per step (default 16)")
parser.add_argument("--step-ms", type=float, default=50, help="the compute a step stands for, slept (default 50)")
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

# the same data on every rank: y = X w + noise
g = torch.Generator().manual_seed(1)
x = torch.randn(args.steps * args.batch * world, 16, generator=g)
y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(len(x), 1, generator=g)

torch.manual_seed(0)                      # the same initial weights on every rank
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

for epoch in range(args.epochs):
    for step in range(args.steps):
        first = (step * world + rank) * args.batch            # this rank's slice of the global batch
        loss = F.mse_loss(model(x[first:first + args.batch]), y[first:first + args.batch])
        optimizer.zero_grad()
        loss.backward()                                       # DDP all_reduces the gradients here
        optimizer.step()
        time.sleep(args.step_ms / 1000)
    mean = loss.detach().clone()
    dist.all_reduce(mean)                                     # the epoch's loss, averaged over ranks
    if rank == 0:
        print(f"epoch {epoch}: loss {mean.item() / world:.4f}", flush=True)

dist.destroy_process_group()
