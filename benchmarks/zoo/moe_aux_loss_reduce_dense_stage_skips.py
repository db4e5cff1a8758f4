# zoo: culprit=0 op=all_reduce|send line=18|16|44|30 kind=hang nproc=2 timeout=30
# zoo: about=a two-stage pipeline whose MoE layers all sit on the last stage (the first stage holds the dense layers); after each step the aux-loss tracker all_reduces every loss name the rank has recorded, in its own dict's order, so the dense stage (rank 0) has no names and reduces nothing and goes on to send the next micro-batch while rank 1 waits in the load-balancing loss all_reduce
# zoo: source=https://github.com/NVIDIA-NeMo/RL/pull/3419
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
stage = dist.get_rank()
torch.manual_seed(stage)
MB, D, EXPERTS = 16, 64, 4
tracked = {}                                    # aux-loss tracker: name -> running value


def reduce_tracked_losses():
    for name in list(tracked):
        t = tracked[name].reshape(1).clone()
        dist.all_reduce(t)
        tracked[name] = t / dist.get_world_size()


if stage == 0:
    layers = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU())
else:
    router, experts = nn.Linear(D, EXPERTS), nn.ModuleList(nn.Linear(D, D) for _ in range(EXPERTS))

for step in range(3):
    if stage == 0:
        act = layers(torch.randn(MB, D))
        dist.send(act.detach(), dst=1)
        grad = torch.empty(MB, D)
        dist.recv(grad, src=1)
        act.backward(grad)
    else:
        act = torch.empty(MB, D)
        dist.recv(act, src=0)
        act.requires_grad_()
        probs = router(act).softmax(-1)
        out = sum(probs[:, e:e + 1] * experts[e](act) for e in range(EXPERTS))
        balance = EXPERTS * (probs.mean(0) ** 2).sum()
        tracked["load_balancing_loss"] = balance.detach()
        (out.pow(2).mean() + 0.01 * balance).backward()
        dist.send(act.grad, dst=0)
    reduce_tracked_losses()
dist.destroy_process_group()
