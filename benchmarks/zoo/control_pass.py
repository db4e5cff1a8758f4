# zoo: culprit=none kind=pass nproc=2 timeout=60
# zoo: about=a correct script (the control: no tool should blame anyone; its time is each tool's start and end)
# zoo: source=https://github.com/pytorch/pytorch/issues/150433 (its script with the bug line left commented out)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(16)
for _ in range(3):
    dist.all_reduce(t)
dist.destroy_process_group()
