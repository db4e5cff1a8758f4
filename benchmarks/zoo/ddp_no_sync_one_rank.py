# zoo: culprit=0 op=all_reduce line=23 kind=mismatch nproc=3 timeout=40
# zoo: about=DDP with gradient accumulation: rank 0 counts micro-steps from 1, so it runs its syncing backward one micro-step later than the others
# zoo: source=https://github.com/huggingface/picotron/pull/5
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import contextlib

from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)
model = DDP(torch.nn.Linear(32, 32))
accum = 2
start = 1 if rank == 0 else 0             # the bug: an off-by-one on rank 0
for micro in range(start, start + 5):
    sync = (micro + 1) % accum == 0
    ctx = contextlib.nullcontext() if sync else model.no_sync()
    with ctx:
        model(torch.randn(4, 32)).sum().backward()
dist.barrier()
dist.destroy_process_group()
