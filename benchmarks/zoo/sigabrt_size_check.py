# zoo: culprit=0|1 op=all_reduce line=11 kind=abort nproc=2 timeout=30
# zoo: about=two ranks, 1000 and 12 elements: gloo's size check aborts a rank (SIGABRT, no traceback)
# zoo: source=https://github.com/NVIDIA/nccl/issues/1394
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(1000 if rank == 0 else 12)
dist.all_reduce(t)
dist.destroy_process_group()
