# zoo: culprit=0 op=broadcast_object_list line=19|13|16 kind=exception nproc=3 timeout=30
# zoo: about=only rank 0 parses the run config, into a class it defines under if rank == 0; the others cannot unpickle it in broadcast_object_list
# zoo: source=https://github.com/bayesian-optimization/BayesianOptimization/issues/98 https://github.com/pytorch/pytorch/pull/150815
from dataclasses import dataclass
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 0:
    @dataclass
    class RunConfig:
        lr: float = 3e-4
        steps: int = 100
    box = [RunConfig()]
else:
    box = [None]
dist.broadcast_object_list(box, src=0)
dist.all_reduce(torch.ones(4))
print(rank, box[0])
dist.destroy_process_group()
