# zoo: culprit=0|1 op=recv line=12 kind=deadlock nproc=2 timeout=30
# zoo: about=both ranks recv before they send
# zoo: source=https://github.com/NVIDIA/nccl/issues/479
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(16)
peer = 1 - rank
dist.recv(t, src=peer)
dist.send(t, dst=peer)
dist.destroy_process_group()
