# zoo: culprit=0 op=set line=34|33 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 saves the checkpoint and announces it in the store after incrementing the step, while the others poll store.get until the announced step equals the step they saved at: they poll forever, rank 0 waits in the next all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/67972
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = _get_default_store()
model = torch.nn.Linear(16, 16)
SAVE_EVERY = 2


def wait_for_checkpoint(step, poll=0.2):
    while True:                                   # the others must not reload a half-written file
        if store.check(["ckpt_step"]) and int(store.get("ckpt_step")) == step:
            return
        time.sleep(poll)


step = 0
while step < 6:
    model(torch.randn(8, 16)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    if (step + 1) % SAVE_EVERY == 0:
        if rank == 0:
            torch.save(model.state_dict(), "/tmp/heldout_ckpt.pt")
            step += 1
            store.set("ckpt_step", str(step))
            continue
        wait_for_checkpoint(step)
    step += 1
dist.destroy_process_group()
