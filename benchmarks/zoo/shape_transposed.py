# zoo: culprit=1 op=all_reduce line=11 kind=silent nproc=3 timeout=30
# zoo: about=rank 1 all_reduces a [3, 2] tensor where the others have [2, 3]: same bytes, gloo completes, the values are wrong
# zoo: source=https://github.com/NVIDIA/nccl/issues/1417
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.arange(6.0).reshape(3, 2) if rank == 1 else torch.arange(6.0).reshape(2, 3)
dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
