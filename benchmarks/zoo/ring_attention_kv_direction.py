# zoo: culprit=2 op=batch_isend_irecv line=29|9 kind=hang nproc=4 timeout=30
# zoo: about=ring attention passes the K/V block around the ring with batch_isend_irecv; rank 2 takes its neighbours from a helper that flips the direction for "reverse" layers (its layer config says reverse), so it sends to its left and receives from its right while everyone else sends right: ranks 1, 2 and 3 never match and the ring stalls
# zoo: source=https://github.com/pytorch/PiPPy/issues/969 (batch_isend_irecv whose ops are not matched hangs the batch)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
LAYER_REVERSED = {r: r == 2 for r in range(world)}      # rank 2 loaded the zig-zag layout config


def ring_neighbours(rank, reverse):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    return (prv, nxt) if reverse else (nxt, prv)


q = torch.randn(16, 8)
k, v = torch.randn(16, 8), torch.randn(16, 8)
out = torch.zeros(16, 8)
send_to, recv_from = ring_neighbours(rank, LAYER_REVERSED[rank])
for hop in range(world):
    attn = torch.softmax(q @ k.T / 8 ** 0.5, dim=-1)
    out += attn @ v
    if hop == world - 1:
        break
    kv = torch.cat([k, v])
    incoming = torch.empty_like(kv)
    ops = [dist.P2POp(dist.isend, kv, send_to), dist.P2POp(dist.irecv, incoming, recv_from)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    k, v = incoming[:16], incoming[16:]
print(f"rank {rank} out {out.norm().item():.3f}", flush=True)
dist.destroy_process_group()
