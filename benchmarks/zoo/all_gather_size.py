# zoo: culprit=1 op=all_gather line=14 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 all_gathers 6 elements into a list of 4-element tensors: torch raises on rank 1, the others lose their peer
# zoo: source=https://github.com/NVIDIA/nccl/issues/531 (an allgather whose sizes differ between ranks)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


n = 6 if rank == 1 else 4                 # the bug: rank 1 packs two more elements
x = torch.full((n,), float(rank))
out = [torch.zeros(4) for _ in range(world)]
dist.all_gather(out, x)
print(rank, [o.sum().item() for o in out])
dist.destroy_process_group()
