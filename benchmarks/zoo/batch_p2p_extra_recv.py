# zoo: culprit=0|1 op=batch_isend_irecv|irecv line=15|16|14 kind=deadlock nproc=2 timeout=30
# zoo: about=rank 1 posts two irecvs from rank 0 in batch_isend_irecv, rank 0 sends one message (either may be the bug)
# zoo: source=https://github.com/NVIDIA/nccl/issues/2130
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

a, b = torch.zeros(8), torch.zeros(8)
if rank == 0:
    ops = [dist.P2POp(dist.isend, torch.ones(8), 1)]
else:
    ops = [dist.P2POp(dist.irecv, a, 0), dist.P2POp(dist.irecv, b, 0)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
print("done", rank)
dist.destroy_process_group()
