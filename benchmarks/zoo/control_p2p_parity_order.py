# zoo: culprit=none kind=pass nproc=4 timeout=40
# zoo: about=a correct halo exchange that looks like a deadlock: even ranks send before they receive and odd ranks receive before they send, with blocking send/recv on a ring, and the end gathers results on rank 0 only with gather_object (the others pass no list)
# zoo: source=https://pages.tacc.utexas.edu/~eijkhout/pcse/html/mpi-ptp.html (pairwise exchange: alternate send and receive by parity to avoid the ring deadlock)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
right, left = (rank + 1) % world, (rank - 1) % world
field = torch.full((4, 8), float(rank))

for it in range(3):
    halo = torch.empty(8)
    edge = field[-1].clone()
    if rank % 2 == 0:
        dist.send(edge, dst=right)
        dist.recv(halo, src=left)
    else:
        dist.recv(halo, src=left)
        dist.send(edge, dst=right)
    field = torch.cat([halo[None], field[:-1]]) * 0.5 + field * 0.5

summary = {"rank": rank, "mean": round(field.mean().item(), 4)}
gathered = [None] * world if rank == 0 else None
dist.gather_object(summary, gathered, dst=0)
if rank == 0:
    print(sorted(gathered, key=lambda s: s["rank"]), flush=True)
dist.destroy_process_group()
