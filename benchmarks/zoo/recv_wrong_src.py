# zoo: culprit=1 op=recv line=16 kind=deadlock nproc=3 timeout=30
# zoo: about=rank 0 sends to rank 1, rank 1 receives from rank 2 (a stage index off by one), rank 2 waits at the barrier
# zoo: source=https://github.com/hpc/mpifileutils/pull/26 (a receive from a rank that never sends)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


x = torch.zeros(1024)
if rank == 0:
    dist.send(torch.ones(1024), dst=1)
elif rank == 1:
    prev_stage = rank + 1                 # the bug: should be rank - 1
    dist.recv(x, src=prev_stage)
dist.barrier()
dist.destroy_process_group()
