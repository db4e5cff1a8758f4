# zoo: culprit=0|1|2 op=irecv|wait|send line=18|19|20 kind=deadlock nproc=3 timeout=30
# zoo: about=a ring halo exchange was made "non-blocking" by turning the recv into irecv, but the helper waits on the request before it sends its own halo; every rank waits for its left neighbour's halo, which that neighbour only sends after its own wait: nobody sends and the ring deadlocks
# zoo: source=https://github.com/pytorch/pytorch/issues/172668
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
left, right = (rank - 1) % world, (rank + 1) % world
torch.manual_seed(rank)
field = torch.randn(34, 64)


def exchange_halo(field):
    # rows 0 and -1 are ghost rows; row -2 is our last interior row
    halo_in = torch.empty(64)
    halo_out = field[-2].clone()
    req = dist.irecv(halo_in, src=left)
    req.wait()
    dist.send(halo_out, dst=right)
    field[0] = halo_in


for it in range(5):
    exchange_halo(field)
    field[1:-1] = 0.25 * (field[:-2] + field[2:]) + 0.5 * field[1:-1]
    resid = field[1:-1].abs().mean().reshape(1)
    dist.all_reduce(resid)
    if rank == 0:
        print(f"iter {it} residual {resid.item():.4f}", flush=True)

dist.destroy_process_group()
