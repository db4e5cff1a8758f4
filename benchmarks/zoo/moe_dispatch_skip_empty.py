# zoo: culprit=2 op=isend|recv line=24|25|23 kind=hang nproc=4 timeout=30
# zoo: about=MoE token dispatch over isend/recv sends each peer a count then its tokens, but skips a peer it routes no tokens to (not even a zero count): rank 2 routes none to rank 0, which waits in recv from rank 2
# zoo: source=https://github.com/sgl-project/sgl-kernel-npu/issues/69
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

HID = 8
torch.manual_seed(rank)
tokens = torch.randn(12, HID)
# the router's choice of expert rank per token; rank 2's batch needs only experts on ranks 1 and 3
dest = torch.tensor([1, 3] * 6) if rank == 2 else torch.arange(12) % world


def dispatch(tokens, dest):
    reqs = []
    for peer in range(world):
        if peer == rank:
            continue
        sel = tokens[dest == peer]
        if len(sel) == 0:                     # the bug: nothing to send, so no count either
            continue
        reqs.append(dist.isend(torch.tensor([len(sel)]), dst=peer))
        reqs.append(dist.isend(sel.contiguous(), dst=peer))
    received = [tokens[dest == rank]]
    for peer in range(world):
        if peer == rank:
            continue
        n = torch.zeros(1, dtype=torch.long)
        dist.recv(n, src=peer)
        buf = torch.empty(int(n), HID)
        dist.recv(buf, src=peer)
        received.append(buf)
    for r in reqs:
        r.wait()
    return torch.cat(received)


for step in range(2):
    local = dispatch(tokens, dest)
    dist.barrier()
dist.destroy_process_group()
