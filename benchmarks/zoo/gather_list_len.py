# zoo: culprit=0 op=gather line=13 kind=exception nproc=3 timeout=30
# zoo: about=the destination rank 0 passes a gather_list of 2 tensors to a group of 3: torch raises on rank 0, the others wait for it
# zoo: source=https://github.com/pytorch/pytorch/issues/27440
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


x = torch.full((4,), float(rank))
gather_list = [torch.zeros(4) for _ in range(2)] if rank == 0 else None   # the bug: 2, not world
dist.gather(x, gather_list, dst=0)
dist.barrier()
dist.destroy_process_group()
