# zoo: culprit=1 op=irecv line=17|16 kind=silent nproc=2 timeout=30
# zoo: about=rank 1 reads the irecv buffer before waiting on the work: it uses zeros, and the run passes with a wrong value
# zoo: source=https://github.com/pytorch/tutorials/issues/3009
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 0:
    time.sleep(2)
    dist.send(torch.full((4,), 7.0), dst=1)
else:
    buf = torch.zeros(4)
    work = dist.irecv(buf, src=0)
    total = buf.sum().item()
    work.wait()
    print("rank 1 used", total, "received", buf.sum().item())
dist.barrier()
dist.destroy_process_group()
