# zoo: culprit=0|1|2 op=send line=11 kind=deadlock nproc=3 timeout=30
# zoo: about=a ring of blocking sends of 64 MB: every rank sends before it receives
# zoo: source=https://github.com/NVIDIA/nccl/issues/479
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

big = torch.ones(16 << 20)
dist.send(big, dst=(rank + 1) % world)
dist.recv(big, src=(rank - 1) % world)
dist.destroy_process_group()
