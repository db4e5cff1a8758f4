# zoo: culprit=0 op=send line=12 kind=deadlock nproc=3 timeout=30
# zoo: about=rank 0 sends to rank 2 where rank 1 waits for the message
# zoo: source=https://github.com/hpc/mpifileutils/pull/26
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(16)
if rank == 0:
    dist.send(t, dst=2)               # meant dst=1
elif rank == 1:
    dist.recv(t, src=0)
dist.barrier()
dist.destroy_process_group()
