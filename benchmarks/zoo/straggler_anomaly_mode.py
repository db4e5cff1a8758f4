# zoo: culprit=1 op=all_reduce line=12|20 kind=straggler nproc=2 timeout=60
# zoo: about=rank 1 was left with autograd anomaly detection on (a debug flag from its environment): every backward is far slower there; the run passes
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/12344
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.set_num_threads(1)
if rank == 1:
    torch.autograd.set_detect_anomaly(True)
layers = [torch.nn.Linear(64, 64) for _ in range(400)]
model = torch.nn.Sequential(*layers)
for step in range(25):
    x = torch.randn(32, 64)
    model(x).pow(2).mean().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    dist.all_reduce(grads)
dist.destroy_process_group()
