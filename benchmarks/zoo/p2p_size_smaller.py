# zoo: culprit=0|1 op=send|recv line=12|15 kind=silent nproc=2 timeout=30
# zoo: about=rank 0 sends 3 elements into rank 1's 5-element recv: it completes, the last two stay zero (either side's size may be the bug)
# zoo: source=https://github.com/pytorch/pytorch/issues/113376 (a send of 3 into a recv of 4 returns incomplete data)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


if rank == 0:
    dist.send(torch.ones(3), dst=1)
else:
    buf = torch.zeros(5)
    dist.recv(buf, src=0)
    print("received", buf)
dist.barrier()
dist.destroy_process_group()
