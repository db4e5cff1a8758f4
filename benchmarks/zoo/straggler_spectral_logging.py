# zoo: culprit=1 op=all_reduce line=32|24|34 kind=straggler nproc=3 timeout=90
# zoo: about=every step can log the singular values of each weight and gradient; LOG_EVERY is 100 in the job config but rank 1's node exports LOG_EVERY=1 from a debugging session, so rank 1 runs the SVDs every step and the others wait for it in all_reduce; the run passes
# zoo: source=https://github.com/facebookresearch/metaseq/issues/327
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 1:
    os.environ["LOG_EVERY"] = "1"             # left over in rank 1's node profile
log_every = int(os.environ.get("LOG_EVERY", "100"))

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])


def log_spectra(step):
    stats = {}
    for name, p in model.named_parameters():
        if p.dim() == 2:
            stats[name] = (torch.linalg.svdvals(p.detach())[0].item(),
                           torch.linalg.svdvals(p.grad)[0].item())
    return stats


for step in range(1, 13):
    model(torch.randn(8, 512)).pow(2).mean().backward()
    if step % log_every == 0:
        log_spectra(step)
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
dist.destroy_process_group()
