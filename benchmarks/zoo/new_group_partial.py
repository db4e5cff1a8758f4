# zoo: culprit=2|3 op=new_group line=12 kind=hang nproc=4 timeout=30
# zoo: about=only ranks 0 and 1 call new_group: it is collective over the world
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

t = torch.ones(16)
dist.all_reduce(t)
if rank < 2:
    pair = dist.new_group([0, 1])
    dist.all_reduce(t, group=pair)
dist.all_reduce(t)
dist.destroy_process_group()
