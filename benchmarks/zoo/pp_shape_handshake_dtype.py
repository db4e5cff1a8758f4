# zoo: culprit=1|2 op=send|recv line=30|29|16 kind=abort nproc=3 timeout=30
# zoo: about=pipeline stages send their output shape before the activations; the last stage's own receive path allocates the shape buffer as int32 where the sender's torch.tensor(shape) is int64: gloo's size check aborts rank 2 (either side's dtype may be the bug)
# zoo: source=https://github.com/pytorch/pytorch/pull/165539
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(rank)
block = torch.nn.Linear(8, 8)
last = rank == world - 1


def send_activation(h, dst):
    dist.send(torch.tensor(h.shape), dst=dst)          # int64 shape header
    dist.send(h.contiguous(), dst=dst)


def recv_activation(src):
    shape = torch.empty(2, dtype=torch.long)
    dist.recv(shape, src=src)
    h = torch.empty(*shape.tolist())
    dist.recv(h, src=src)
    return h


def recv_for_loss(src):                                # the last stage's copy of the helper
    shape = torch.empty(2, dtype=torch.int32)          # the bug: int32, the sender sends int64
    dist.recv(shape, src=src)
    h = torch.empty(*shape.tolist())
    dist.recv(h, src=src)
    return h


with torch.no_grad():
    for mb in range(3):
        if rank == 0:
            send_activation(block(torch.randn(4 + mb, 8)), dst=1)
        elif not last:
            send_activation(block(recv_activation(src=rank - 1)), dst=rank + 1)
        else:
            print("mb", mb, "loss", block(recv_for_loss(src=rank - 1)).pow(2).mean().item())
dist.destroy_process_group()
