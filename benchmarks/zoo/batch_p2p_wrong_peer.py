# zoo: culprit=2 op=batch_isend_irecv|irecv line=17|18 kind=deadlock nproc=3 timeout=30
# zoo: about=a ring exchange with batch_isend_irecv: rank 2 receives from its next rank instead of its previous one
# zoo: source=https://github.com/pytorch/PiPPy/issues/969
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


send = torch.full((64,), float(rank))
recv = torch.zeros(64)
nxt, prv = (rank + 1) % world, (rank - 1) % world
if rank == 2:
    prv = (rank + 1) % world              # the bug: the wrong neighbour
ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
for req in dist.batch_isend_irecv(ops):
    req.wait()
print(rank, recv[0].item())
dist.barrier()
dist.destroy_process_group()
