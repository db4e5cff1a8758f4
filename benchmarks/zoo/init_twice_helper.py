# zoo: culprit=1 op=init_process_group line=14|8 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 calls a setup helper a second time (its evaluation path) and the helper calls init_process_group again: torch raises there
# zoo: source=https://github.com/NVIDIA/Megatron-LM/pull/521
import torch
import torch.distributed as dist

def setup():
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()

rank, world = setup()
dist.all_reduce(torch.ones(4))
if rank == 1:
    rank, world = setup()
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
