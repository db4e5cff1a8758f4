# zoo: culprit=0 op=all_reduce line=34|32 kind=exception nproc=3 timeout=30
# zoo: about=the loop all_reduces each step's loss for the progress bar; on logging steps rank 0 (the only rank that logs) rebinds loss to loss.item() to print it, so at step 4 it hands all_reduce a Python float and raises TypeError, while ranks 1 and 2 wait in that all_reduce
# zoo: source=https://github.com/meta-llama/llama-cookbook/issues/520
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
LOG_EVERY = 4


def train_step():
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    return loss.detach()


running = 0.0
for step in range(1, 10):
    loss = train_step()
    if rank == 0 and step % LOG_EVERY == 0:
        loss = loss.item()
        print(f"step {step}: loss {loss:.4f}", flush=True)
    dist.all_reduce(loss)
    running = 0.9 * running + 0.1 * float(loss) / world
dist.destroy_process_group()
