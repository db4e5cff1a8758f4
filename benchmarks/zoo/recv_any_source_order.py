# zoo: culprit=2 op=recv line=17|18 kind=silent nproc=3 timeout=30
# zoo: about=rank 2 collects two workers' results with recv from any source and assumes they arrive in rank order; rank 1's comes first, so the results are swapped
# zoo: source=https://github.com/pytorch/pytorch/issues/94819
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank in (0, 1):
    if rank == 0:
        time.sleep(2)
    dist.send(torch.full((4,), float(10 + rank)), dst=2)
else:
    from_0, from_1 = torch.zeros(4), torch.zeros(4)
    dist.recv(from_0)
    dist.recv(from_1)
    print("rank 2 thinks rank 0 sent", from_0[0].item())
dist.barrier()
dist.destroy_process_group()
