# zoo: culprit=2 op=DistributedDataParallel line=11|12|13 kind=exception nproc=3 timeout=30
# zoo: about=rank 2 builds its embedding from a vocabulary it counted itself (one token more); DDP's constructor check rejects the model on every rank
# zoo: source=https://github.com/huggingface/accelerate/issues/1481
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

vocab = 1000 + (1 if rank == 2 else 0)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, 4))
ddp = DDP(model)
loss = ddp(torch.randint(0, 1000, (8,))).sum()
loss.backward()
dist.destroy_process_group()
