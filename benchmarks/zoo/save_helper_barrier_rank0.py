# zoo: culprit=0 op=barrier line=19|32 kind=hang nodes=2 nproc=2 timeout=30
# zoo: about=the checkpoint helper ends with a barrier ("wait for everyone") but is called under if rank == 0: rank 0 waits there, the others go on to the next step's all_reduce
# zoo: source=https://github.com/bytedance/UNO/issues/71
import os
import tempfile

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

ckpt_dir = tempfile.mkdtemp(prefix="ckpt-")


def save_checkpoint(model, step):
    path = os.path.join(ckpt_dir, f"step-{step}.pt")
    torch.save(model.state_dict(), path)
    dist.barrier()                            # "wait for everyone" inside the helper
    return path


torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 7):
    model(torch.randn(8, 16)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step(); opt.zero_grad()
    if step % 3 == 0 and rank == 0:
        save_checkpoint(model, step)          # only the main process saves
dist.destroy_process_group()
