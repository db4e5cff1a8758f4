# zoo: culprit=1 op=DistributedDataParallel line=13|14 kind=exception nproc=3 timeout=60
# zoo: about=rank 1 builds its model with a wider layer; DDP's constructor names it
# zoo: source=https://github.com/huggingface/accelerate/issues/1481 (DDP multi node inconsistent params, raised in _verify_param_shape_across_processes)
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
hidden = 32
if rank == 1:
    hidden = 64                           # a config read from the wrong file
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Linear(hidden, 1)))
loss = model(torch.randn(4, 8)).sum()
loss.backward()
dist.destroy_process_group()
