# zoo: culprit=1 op=all_reduce line=16|17 kind=killed nproc=3 timeout=30
# zoo: about=rank 1 dereferences a null pointer through ctypes (a native extension's crash) between two all_reduces: SIGSEGV, no traceback
# zoo: source=https://github.com/NVIDIA/Megatron-LM/issues/1880
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import ctypes

x = torch.ones(16)
for step in range(4):
    if rank == 1 and step == 2:
        ctypes.string_at(0)               # the bug: a native crash
    dist.all_reduce(x)
dist.destroy_process_group()
