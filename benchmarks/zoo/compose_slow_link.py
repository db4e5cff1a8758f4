# zoo: culprit=1 op=all_reduce line=13 kind=straggler backend=compose nodes=3 nproc=1 timeout=120
# zoo: links=1=10mbit
# zoo: about=node 1's link is 10 Mbit/s (tc tbf); the others are fast
# zoo: source=https://github.com/intelligent-machine-learning/dlrover/issues/678
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(1 << 18)
for step in range(10):
    dist.all_reduce(t)
dist.destroy_process_group()
