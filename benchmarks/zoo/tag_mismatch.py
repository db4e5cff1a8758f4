# zoo: culprit=0|1 op=send|recv line=12|14 kind=deadlock nproc=2 timeout=30
# zoo: about=rank 0 sends with tag 1, rank 1 receives with tag 0
# zoo: source=https://github.com/pytorch/pytorch/issues/94819
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(1 << 20)
if rank == 0:
    dist.send(t, dst=1, tag=1)
else:
    dist.recv(t, src=0, tag=0)
dist.barrier()
dist.destroy_process_group()
