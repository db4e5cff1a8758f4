# zoo: culprit=1 op=send line=37|20 kind=exception nproc=2 timeout=30
# zoo: about=a hand-written two-stage pipeline: the last stage receives the activations into a fresh buffer but never marks it requires_grad, so after its backward act.grad is None and sending the input gradient back raises on rank 1, while rank 0 waits in recv for that gradient
# zoo: source=https://github.com/pytorch/pytorch/issues/152827
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
MB, HIDDEN = 16, 64
if rank == 0:
    stage = nn.Sequential(nn.Linear(32, HIDDEN), nn.GELU())
else:
    stage = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 1))
opt = torch.optim.SGD(stage.parameters(), lr=0.05)


def recv_activations():
    buf = torch.empty(MB, HIDDEN)
    dist.recv(buf, src=0)
    return buf


for step in range(3):
    opt.zero_grad()
    if rank == 0:
        act = stage(torch.randn(MB, 32))
        dist.send(act.detach(), dst=1)
        grad = torch.empty(MB, HIDDEN)
        dist.recv(grad, src=1)
        act.backward(grad)
    else:
        act = recv_activations()
        loss = stage(act).pow(2).mean()
        loss.backward()
        dist.send(act.grad, dst=0)
    opt.step()
dist.destroy_process_group()
