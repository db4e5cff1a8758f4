# zoo: culprit=0|1 op=send|recv line=12|15 kind=abort nproc=2 timeout=30
# zoo: about=rank 0 sends 5 elements where rank 1 posted a 3-element recv: gloo's size check aborts the receiver (SIGABRT) (either side's size may be the bug)
# zoo: source=https://github.com/pytorch/pytorch/issues/113376
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


if rank == 0:
    dist.send(torch.ones(5), dst=1)
else:
    buf = torch.zeros(3)
    dist.recv(buf, src=0)
dist.barrier()
dist.destroy_process_group()
